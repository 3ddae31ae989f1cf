// One GPU's primary context (the one cuBLASLt's built-in runtime also uses), device memory,
// modules loaded from compiled kernels, and launches. The first pieces of the CUDA backend:
// the kernels of the op table will run through these.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "backend/cuda/profiler.h"

namespace forge::cuda {

/// cuda:N's primary context, retained for this object's life, and the one stream all of
/// forge's work on the device is queued on (in order, so a buffer freed to the cache may be
/// reused by the next call without a wait). Every call below makes the context current on
/// the calling thread first. Throws Error(Device) for an N the driver lacks.
class Context {
 public:
  explicit Context(int ordinal);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int ordinal() const { return ordinal_; }
  /// The architecture NVRTC compiles for, e.g. "sm_90".
  const std::string& arch() const { return arch_; }
  CUdevice device() const { return device_; }
  CUstream stream() const { return stream_; }
  /// Whether kernels may be launched early (programmatic dependent launch): compute
  /// capability 9.0 or newer, a driver with cuLaunchKernelEx, and FORGE_CUDA_EARLY_LAUNCH
  /// not 0.
  bool early_launch() const { return early_launch_; }
  void make_current() const;
  /// Waits for all work queued on the stream.
  void synchronize() const;
  /// The stream's kernel timer (--profile).
  Profiler& profiler() const { return *profiler_; }

 private:
  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::string arch_;
  bool early_launch_ = false;
  std::unique_ptr<Profiler> profiler_;
};

/// Device memory of a fixed size, freed with this object.
class DeviceBuffer {
 public:
  DeviceBuffer(const Context& context, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr address() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  /// Copies of `bytes` from or to the host (at most bytes()), in the stream's order; they
  /// return when the host memory may be reused.
  void upload(const void* src, size_t bytes);
  void download(void* dst, size_t bytes) const;

 private:
  const Context& context_;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// A module loaded from a cubin or PTX image (nvrtc_compile's), unloaded with this object.
class Module {
 public:
  Module(const Context& context, const std::vector<char>& image);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// An extern "C" __global__ function of the module; throws Error(Backend) naming it.
  CUfunction function(const char* name) const;

 private:
  const Context& context_;
  CUmodule module_ = nullptr;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// Queues fn on the context's stream. params[i] points to the i-th argument. With `early`
/// (where context.early_launch()), fn may start before the kernel queued before it ends:
/// fn must then read nothing that kernel writes, and write nothing, before its
/// griddepcontrol.wait (kernels/common.cuh, forge_wait_for_previous).
void launch(const Context& context, CUfunction fn, Dim3 grid, Dim3 block, size_t shared_bytes,
            void** params, bool early = false);

}  // namespace forge::cuda
