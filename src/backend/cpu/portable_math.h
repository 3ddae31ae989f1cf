// Helpers of the portable span kernels: a vectorizable exp, a branch-free select, and
// lane-parallel row reductions. Plain C++ that the compiler auto-vectorizes for the
// baseline instruction set.
//
// Include only from files compiled without ISA flags (never from *_avx512.cpp / *_avx2.cpp):
// these are inline functions, and copies compiled for different instruction sets would
// break the one-definition rule (the linker could keep an AVX-512 copy for portable code).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace forge::cpu {

/// mask ? a : b without a branch. A float compare-and-select makes GCC emit control flow
/// (it will not if-convert under the default -ftrapping-math), which blocks vectorization;
/// the bitwise form vectorizes to compare + and/andnot/or.
inline float select(bool mask, float a, float b) {
  const uint32_t k = 0u - static_cast<uint32_t>(mask);
  return std::bit_cast<float>((k & std::bit_cast<uint32_t>(a)) | (~k & std::bit_cast<uint32_t>(b)));
}

/// exp(x) with relative error < 2e-7 over the float range, as plain float/int arithmetic
/// so that loops calling it auto-vectorize. exp(x) = 2^n * exp(r) with n = round(x/ln2)
/// and |r| <= ln2/2; exp(r) by a degree-6 minimax polynomial (Cephes' coefficients).
/// Inputs are clamped to [-87.3, 88]: below, it returns ~1e-38 instead of a denormal or 0;
/// above, ~1.7e38 instead of inf. NaN propagates.
inline float exp_fast(float x) {
  x = select(x < -87.3f, -87.3f, x);
  x = select(x > 88.0f, 88.0f, x);
  // Round x/ln2 to an integer with the 1.5 * 2^23 trick: the float sum's low mantissa bits
  // are then the integer (no float->int conversion, which would be UB on NaN).
  constexpr float kShift = 12582912.0f;
  const float t = x * 1.44269504088896341f + kShift;
  const uint32_t n_bits = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kShift);
  const float n = t - kShift;
  // r = x - n ln2, with ln2 split in two so that n * hi is exact.
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n built in the exponent field; n is in [-126, 127] after the clamp.
  const float scale = std::bit_cast<float>((n_bits + 127u) << 23);
  return p * scale;
}

// Portable row reductions with 16 independent lanes, which the compiler maps onto vector
// registers (one accumulator would be a serial dependency chain, and reassociating it
// needs -ffast-math).
inline constexpr int kLanes = 16;

/// max of x[0, n) (-inf for n = 0).
inline float row_max(const float* x, int64_t n) {
  float m[kLanes];
  for (float& v : m) v = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) m[j] = select(x[i + j] > m[j], x[i + j], m[j]);
  for (; i < n; ++i) m[0] = select(x[i] > m[0], x[i], m[0]);
  float r = m[0];
  for (int j = 1; j < kLanes; ++j) r = select(m[j] > r, m[j], r);
  return r;
}

/// sum of x[0, n), in float.
inline float row_sum(const float* x, int64_t n) {
  float s[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) s[j] += x[i + j];
  for (; i < n; ++i) s[0] += x[i];
  float r = 0.0f;
  for (float v : s) r += v;
  return r;
}

/// dot(a[0, n), b[0, n)), in float.
inline float row_dot(const float* a, const float* b, int64_t n) {
  float s[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) s[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) s[0] += a[i] * b[i];
  float r = 0.0f;
  for (float v : s) r += v;
  return r;
}

}  // namespace forge::cpu
