// Span kernels: the inner loops of the CPU element and row ops, each over one contiguous
// span (a row, or a slice of a flat tensor). Every kernel has a portable C++ version (in
// the family file: elementwise.cpp, rows.cpp, gather.cpp) and, where the math is
// transcendental-heavy, an AVX-512 version (elementwise_avx512.cpp, rows_avx512.cpp,
// gather_avx512.cpp) chosen at run time by use_avx512().
//
// Also here: exp_fast, the portable exp that those loops use (std::exp does not vectorize).
#pragma once

#include <bit>
#include <cstdint>

#include "backend/cpu/simd.h"

namespace forge::cpu {

/// True when the AVX-512 span kernels may run (CPU support, FORGE_SIMD not capping it).
inline bool use_avx512() { return simd_level() == SimdLevel::Avx512; }

/// Elements of memory-bound work one thread should get before a second thread is worth
/// waking (~64 KiB of floats): decode-sized rows (768 wide) stay on the calling thread.
inline constexpr int64_t kGrainElems = 16384;
/// The same for exp/tanh-heavy loops, where each element costs ~20 flops.
inline constexpr int64_t kGrainTranscendental = 4096;

/// Rows per task for a row op whose rows hold `cols` elements.
inline int64_t row_grain(int64_t cols, int64_t grain_elems) {
  return cols >= grain_elems ? 1 : grain_elems / (cols > 0 ? cols : 1);
}

/// exp(x) with relative error < 2e-7 over the float range, as plain float/int arithmetic
/// so that loops calling it auto-vectorize. exp(x) = 2^n * exp(r) with n = round(x/ln2)
/// and |r| <= ln2/2; exp(r) by a degree-6 minimax polynomial (Cephes' coefficients).
/// Inputs are clamped to [-87.3, 88]: below, it returns ~1e-38 instead of a denormal or 0;
/// above, ~1.7e38 instead of inf. NaN propagates.
inline float exp_fast(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.0f ? 88.0f : x;
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

/// y[0, n) = scale * softmax(x[0, n)), n >= 1; dispatches to AVX-512 or portable code.
/// Defined in rows.cpp; ce_bwd (gather.cpp) shares it.
void softmax_row(const float* x, float* y, int64_t n, float scale);

// --- AVX-512 span kernels (defined in *_avx512.cpp; call only when use_avx512()) ---

/// y[i] = gelu(x[i]) (tanh approximation), i < n. y may alias x.
void gelu_avx512(const float* x, float* y, int64_t n);
/// dx[i] = dy[i] * gelu'(x[i]), i < n.
void gelu_bwd_avx512(const float* x, const float* dy, float* dx, int64_t n);
/// y[0, n) = scale * softmax(x[0, n)); n >= 1.
void softmax_row_avx512(const float* x, float* y, int64_t n, float scale);
/// One LayerNorm row of C >= 1 elements.
void layernorm_row_avx512(const float* x, const float* gamma, const float* beta, float eps,
                          float* y, int64_t C);
/// log(sum(exp(x[0, n)))), max-subtracted, summed in double; n >= 1.
float logsumexp_avx512(const float* x, int64_t n);

}  // namespace forge::cpu
