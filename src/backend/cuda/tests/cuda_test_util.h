// Helpers of the CUDA backend's tests: whether this machine has a GPU (the GPU tests skip
// without one), and the kernels a profiled call launched.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "backend/cuda/driver.h"
#include "forge/device_queue.h"
#include "forge/devices.h"

namespace forge::cuda::test {

inline bool have_gpu() { return !list_gpus().gpus.empty(); }

// The kernels of the calls since profiling was switched on, by name and count.
inline std::map<std::string, uint64_t> launches_by_kernel(const Device& dev) {
  std::map<std::string, uint64_t> n;
  for (const KernelTime& t : kernel_times(dev)) n[t.kernel] += t.dispatches;
  return n;
}

}  // namespace forge::cuda::test
