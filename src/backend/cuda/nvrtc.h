// NVRTC, CUDA's run-time compiler (libnvrtc.so.13, .12 or .11.2), loaded on first use:
// forge's kernels are CUDA C++ source compiled for the device it runs on, so neither the
// build nor CI needs nvcc. Nothing here needs a GPU: compiling for an architecture is
// possible on any machine that has the library.
#pragma once

#include <string>
#include <vector>

namespace forge::cuda {

/// NVRTC's version, e.g. {13, 0}. Throws Error(Device) when no NVRTC is found.
struct NvrtcVersion {
  int major = 0, minor = 0;
};
NvrtcVersion nvrtc_version();

/// A compiled program: a cubin (for "sm_XY") or NUL-terminated PTX (for "compute_XY"),
/// which cuModuleLoadData takes either way, and the compiler's log (warnings).
struct CompiledKernel {
  std::vector<char> image;
  bool is_cubin = false;
  std::string log;
};

/// Compiles `source` (named `name` in messages) for `arch` ("sm_90", "compute_80", ...)
/// with `options` besides the architecture (e.g. "--std=c++17"). Throws Error(Backend)
/// with NVRTC's log when the source does not compile, Error(Device) without NVRTC.
CompiledKernel nvrtc_compile(const std::string& source, const std::string& name,
                             const std::string& arch, const std::vector<std::string>& options);

}  // namespace forge::cuda
