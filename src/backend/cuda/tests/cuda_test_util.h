// Helpers of the CUDA backend's tests: whether this machine has a GPU (the GPU tests skip
// without one), deterministic test values, and the kernels a profiled call launched.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "forge/device_queue.h"
#include "forge/devices.h"

namespace forge::cuda::test {

inline bool have_gpu() { return !list_gpus().gpus.empty(); }

// n test values sin(f i) + shift.
inline std::vector<float> sin_fill(int64_t n, float f, float shift) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(f * static_cast<float>(i)) + shift;
  return v;
}

// The kernels of the calls since profiling was switched on, by name and count.
inline std::map<std::string, uint64_t> launches_by_kernel(const Device& dev) {
  std::map<std::string, uint64_t> n;
  for (const KernelTime& t : kernel_times(dev)) n[t.kernel] += t.dispatches;
  return n;
}

}  // namespace forge::cuda::test
