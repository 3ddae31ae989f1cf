// What forge bench's op timings share (internal to the CLI): random inputs and the median
// time per call of a function on a device.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "forge/ops.h"
#include "forge/tensor.h"

namespace forge::cli {

/// Uniform values in [-1, 1) from a counter-based hash: reproducible and fast enough for the
/// 38M elements of the LM-head shape (a std::mt19937 loop would dominate the run).
inline void fill_random(Tensor& t, uint64_t seed) {
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<float>(dropout_hash(seed, static_cast<uint64_t>(i)) >> 8) *
               (2.0f / 16777216.0f) -
           1.0f;
}

using Clock = std::chrono::steady_clock;

/// Seconds per call of fn, averaged over `calls` back-to-back calls and one `sync` after them
/// (a GPU backend only records the calls: sync waits until the device has run them).
inline double seconds_per_call(const std::function<void()>& fn, int64_t calls,
                               const std::function<void()>& sync) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < calls; ++i) fn();
  if (sync) sync();
  return std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(calls);
}

/// Warm-up, then the median over `repeat` samples of the time per call. A sample repeats
/// the call until it lasts >= 2 ms, so that tiny shapes are not lost in timer noise.
inline double median_seconds(const std::function<void()>& fn, int repeat,
                             const std::function<void()>& sync = {}) {
  // The first call pays page faults, pool wake-up, lazily built tables (and pipelines); the
  // second one estimates the steady cost.
  seconds_per_call(fn, 1, sync);
  const double estimate = std::max(seconds_per_call(fn, 1, sync), 1e-9);
  const int64_t inner =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(2e-3 / estimate)), 1, int64_t{1} << 20);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(repeat));
  for (int r = 0; r < repeat; ++r) samples.push_back(seconds_per_call(fn, inner, sync));
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  return samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
}

}  // namespace forge::cli
