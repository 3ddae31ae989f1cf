// The portable span kernels and their helpers: a vectorizable exp, a branch-free select,
// lane-parallel row reductions, and the loops of gelu, softmax, layernorm, logsumexp,
// dropout and AdamW over one contiguous span. Plain C++ that the compiler auto-vectorizes
// for whatever instruction set the including file is compiled for: the family files
// (elementwise.cpp, rows.cpp, gather.cpp) use it for the baseline ISA, spans_avx2.cpp for
// AVX2 + FMA.
//
// Everything is in an unnamed namespace on purpose: each including file must get its own
// private copy, compiled with its own flags. Shared inline definitions compiled for two
// instruction sets would break the one-definition rule (the linker could keep the AVX2 copy
// for baseline code). For the same reason these loops call no inline function from outside
// this header except constexpr ones that are always folded or inlined (dropout_hash).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include "core/bit_cast.h"

#include "backend/cpu/vec_kernels.h"
#include "forge/ops.h"

namespace forge::cpu {
namespace {

/// mask ? a : b without a branch. A float compare-and-select makes GCC emit control flow
/// (it will not if-convert under the default -ftrapping-math), which blocks vectorization;
/// the bitwise form vectorizes to compare + and/andnot/or.
inline float select(bool mask, float a, float b) {
  const uint32_t k = 0u - static_cast<uint32_t>(mask);
  return forge::bit_cast<float>((k & forge::bit_cast<uint32_t>(a)) |
                                (~k & forge::bit_cast<uint32_t>(b)));
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
  const uint32_t n_bits = forge::bit_cast<uint32_t>(t) - forge::bit_cast<uint32_t>(kShift);
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
  const float scale = forge::bit_cast<float>((n_bits + 127u) << 23);
  return p * scale;
}

// Portable row reductions with 16 independent lanes, which the compiler maps onto vector
// registers (one accumulator would be a serial dependency chain, and reassociating it
// needs -ffast-math).
constexpr int kLanes = 16;

/// An int32 whose order is the float order (-0 just below +0; NaNs at the ends), and back.
/// GCC vectorizes an integer max reduction, but not a float one (that needs
/// -ffinite-math-only), so row_max runs on these keys.
inline int32_t order_key(float f) {
  const int32_t i = forge::bit_cast<int32_t>(f);
  return i ^ ((i >> 31) & 0x7fffffff);
}
inline float from_order_key(int32_t k) {
  return forge::bit_cast<float>(k ^ ((k >> 31) & 0x7fffffff));
}

/// max of x[0, n) (-inf for n = 0), exact.
inline float row_max(const float* x, int64_t n) {
  int32_t m = order_key(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t k = order_key(x[i]);
    m = k > m ? k : m;
  }
  return from_order_key(m);
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

constexpr float kK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kK1 = 0.044715f;

// GELU via 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) (derivation in elementwise_avx512.cpp).
// exp_fast clamps its input to [-87.3, 88], so 1 + e and e * s stay finite.
inline void gelu_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kK0 * v * (1.0f + kK1 * v * v);
    y[i] = v / (1.0f + exp_fast(-2.0f * u));
  }
}

inline void gelu_bwd_loop(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kK0 * v * (1.0f + kK1 * v * v);
    const float e = exp_fast(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    const float du = kK0 * (1.0f + 3.0f * kK1 * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (e * s) * du);
  }
}

inline void adamw_loop(float* param, const float* g, float* m, float* v, int64_t n,
                       const AdamWCoeffs& k) {
  for (int64_t i = 0; i < n; ++i) {
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * g[i];
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
    param[i] = param[i] * k.decay - k.step_size * mi / denom;
  }
}

inline void dropout_loop(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                         uint32_t threshold, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = (dropout_hash(seed, index0 + static_cast<uint64_t>(i)) >> 8) >= threshold;
    y[i] = select(keep, x[i] * scale, 0.0f);
  }
}

inline void softmax_row_loop(const float* x, float* y, int64_t n, float scale) {
  const float mx = row_max(x, n);
  for (int64_t i = 0; i < n; ++i) y[i] = exp_fast(x[i] - mx);
  const float k = scale / row_sum(y, n);
  for (int64_t i = 0; i < n; ++i) y[i] *= k;
}

// Mean and 1/sqrt(biased var + eps) of one row (two passes: no E[x^2] - E[x]^2 cancellation).
inline void row_mean_rstd(const float* x, int64_t C, float eps, float& mean, float& rstd) {
  mean = row_sum(x, C) / static_cast<float>(C);
  float s[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= C; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float d = x[i + j] - mean;
      s[j] += d * d;
    }
  for (; i < C; ++i) s[0] += (x[i] - mean) * (x[i] - mean);
  float var = 0.0f;
  for (float v : s) var += v;
  var /= static_cast<float>(C);
  rstd = 1.0f / std::sqrt(var + eps);
}

inline void layernorm_row_loop(const float* x, const float* gamma, const float* beta, float eps,
                               float* y, int64_t C) {
  float mean, rstd;
  row_mean_rstd(x, C, eps, mean, rstd);
  for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
}

// LayerNorm backward of one row, C >= 1. With xhat = (x - mean) rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// and the row's share of the parameter gradients is added to dgamma_acc += dy * xhat and
// dbeta_acc += dy.
inline void layernorm_bwd_row_loop(const float* x, const float* gamma, const float* dy, float eps,
                                   float* dx, int64_t C, float* dgamma_acc, float* dbeta_acc) {
  float mu, rs;
  row_mean_rstd(x, C, eps, mu, rs);
  // Two single-accumulator lane loops: GCC 12 does not vectorize one loop that fills two
  // lane arrays (10x slower).
  const float sum_g = row_dot(dy, gamma, C);
  float s[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= C; c += kLanes)
    for (int j = 0; j < kLanes; ++j) s[j] += dy[c + j] * gamma[c + j] * (x[c + j] - mu);
  for (; c < C; ++c) s[0] += dy[c] * gamma[c] * (x[c] - mu);
  float sum_gx = 0.0f;
  for (float v : s) sum_gx += v;
  sum_gx *= rs;
  const float mean_g = sum_g / static_cast<float>(C);
  const float mean_gx = sum_gx / static_cast<float>(C);
  // Separate loops: with all five streams in one, GCC 12 gives up on vectorizing.
  for (c = 0; c < C; ++c) {
    const float xhat = (x[c] - mu) * rs;
    dx[c] = rs * (dy[c] * gamma[c] - mean_g - xhat * mean_gx);
  }
  for (c = 0; c < C; ++c) dgamma_acc[c] += dy[c] * ((x[c] - mu) * rs);
  for (c = 0; c < C; ++c) dbeta_acc[c] += dy[c];
}

// log(sum(exp(x))) with the max subtracted; the exps are summed in double (a vocabulary
// row has ~50k terms). Blocks of 256 keep the exp loop simple enough to auto-vectorize.
inline float logsumexp_loop(const float* x, int64_t n) {
  const float mx = row_max(x, n);
  if (!std::isfinite(mx)) return mx;  // all -inf, or an inf: that is the answer
  constexpr int64_t kBlock = 256;
  float e[kBlock];
  double acc[8] = {};
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t len = std::min(kBlock, n - i0);
    for (int64_t j = 0; j < len; ++j) e[j] = exp_fast(x[i0 + j] - mx);
    int64_t j = 0;
    for (; j + 8 <= len; j += 8)
      for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(e[j + k]);
    for (; j < len; ++j) acc[0] += static_cast<double>(e[j]);
  }
  double sum = 0.0;
  for (double a : acc) sum += a;
  return mx + static_cast<float>(std::log(sum));
}

}  // namespace
}  // namespace forge::cpu
