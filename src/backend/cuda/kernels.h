// forge's CUDA kernels (kernels/*.cu, embedded in the binary by embed_kernels.cmake),
// compiled at run time by NVRTC for the device's own architecture and loaded as one module,
// and typed launches of them. The compiled image is kept on disk (kernel_cache_dir()), so
// a process after the first loads it in milliseconds instead of compiling for seconds.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/context.h"

namespace forge::cuda {

/// The kernels' source: kernels/common.cuh, then kernels/*.cu in alphabetical order.
extern const char* const kKernelSource;

/// Where compiled images are kept: $FORGE_CACHE_DIR/cuda, else $XDG_CACHE_HOME/forge/cuda,
/// else $HOME/.cache/forge/cuda; "" when none of them is set (no disk cache).
std::string kernel_cache_dir();

/// The kernels compiled for `arch` ("sm_90"): from the disk cache when an image made from
/// the same source, options, architecture and NVRTC version is there, else by NVRTC (and
/// then stored, best effort). Throws what nvrtc_compile throws.
std::vector<char> kernel_image(const std::string& arch);

/// The module on one device, and launches by kernel name.
class Kernels {
 public:
  explicit Kernels(const Context& context);

  /// The kernel `name` (a string literal); Error(Backend) if the module lacks it.
  CUfunction function(const char* name);

  /// Queues kernel `name` on the context's stream with `args`, each passed by value with
  /// exactly the type the kernel declares (pointers as CUdeviceptr, i64 as int64_t).
  template <class... Args>
  void launch(const char* name, Dim3 grid, Dim3 block, size_t shared_bytes, const Args&... args) {
    launch_as(false, name, grid, block, shared_bytes, args...);
  }

  /// launch() of a kernel that may start before the one queued before it ends (it calls
  /// forge_wait_for_previous before touching anything that kernel writes); an ordinary
  /// launch where the device or driver lacks that, and while profiling (each kernel between
  /// its own pair of events).
  template <class... Args>
  void launch_early(const char* name, Dim3 grid, Dim3 block, size_t shared_bytes,
                    const Args&... args) {
    launch_as(true, name, grid, block, shared_bytes, args...);
  }

  /// launch_early() when `early`, else launch().
  template <class... Args>
  void launch_early_if(bool early, const char* name, Dim3 grid, Dim3 block, size_t shared_bytes,
                       const Args&... args) {
    launch_as(early, name, grid, block, shared_bytes, args...);
  }

  /// Launches so far.
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }

  const Context& context() const { return context_; }

 private:
  template <class... Args>
  void launch_as(bool early, const char* name, Dim3 grid, Dim3 block, size_t shared_bytes,
                 const Args&... args) {
    static_assert(
        ((std::is_trivially_copyable_v<Args> && (sizeof(Args) == 4 || sizeof(Args) == 8)) && ...),
        "kernel arguments are 4- or 8-byte values");
    void* params[] = {const_cast<void*>(static_cast<const void*>(&args))...};
    const CUfunction fn = function(name);
    Profiler& p = context_.profiler();
    p.begin(name);
    cuda::launch(context_, fn, grid, block, shared_bytes, params, early && !p.on());
    p.end();
    launches_.fetch_add(1, std::memory_order_relaxed);
  }

  const Context& context_;
  std::unique_ptr<Module> module_;
  std::mutex mutex_;
  std::map<const char*, CUfunction> functions_;  // keyed by the literal's address
  std::atomic<uint64_t> launches_{0};
};

}  // namespace forge::cuda
