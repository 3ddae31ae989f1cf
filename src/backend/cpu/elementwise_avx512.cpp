// AVX-512 span kernels for GELU and its backward (see vec_kernels.h).
//
// GELU (tanh form) is rewritten with 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)):
//   gelu(x)  = x / (1 + e),                    e = exp(-2u), u = k0 (x + k1 x^3)
//   gelu'(x) = s + 2 x s (1 - s) u',           s = 1 / (1 + e), 1 - s = e s
// which needs one exp, no tanh, and has no cancellation for large |x|.
#include "backend/cpu/exp_avx512.h"  // first: it must precede <immintrin.h>

#include "backend/cpu/vec_kernels.h"
#include "forge/ops.h"

namespace forge::cpu {
namespace {

constexpr float kK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kK1 = 0.044715f;

// e = exp(-2u) with -2u clamped to [-88, 88], so that 1 + e and e * s stay finite.
inline __m512 gelu_e(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(kK0), x),
                                 _mm512_fmadd_ps(_mm512_set1_ps(kK1), x2, _mm512_set1_ps(1.0f)));
  __m512 t = _mm512_mul_ps(u, _mm512_set1_ps(-2.0f));
  t = _mm512_max_ps(_mm512_set1_ps(-88.0f), t);
  t = _mm512_min_ps(_mm512_set1_ps(88.0f), t);
  return exp512(t);
}

inline __m512 gelu16(__m512 x) {
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), gelu_e(x)));
}

inline __m512 gelu_bwd16(__m512 x, __m512 dy) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = gelu_e(x);
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
  const __m512 one_minus_s = _mm512_mul_ps(e, s);
  // u' = k0 (1 + 3 k1 x^2)
  const __m512 du = _mm512_mul_ps(
      _mm512_set1_ps(kK0), _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kK1), _mm512_mul_ps(x, x), one));
  const __m512 two_x_s = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f), x), s);
  const __m512 g = _mm512_fmadd_ps(_mm512_mul_ps(two_x_s, one_minus_s), du, s);
  return _mm512_mul_ps(dy, g);
}

}  // namespace

void gelu_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void gelu_bwd_avx512(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dx + i, gelu_bwd16(_mm512_loadu_ps(x + i), _mm512_loadu_ps(dy + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        dx + i, m, gelu_bwd16(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, dy + i)));
  }
}

void adamw_avx512(float* param, const float* g, float* m, float* v, int64_t n,
                  const AdamWCoeffs& k) {
  const __m512 decay = _mm512_set1_ps(k.decay);
  const __m512 b1 = _mm512_set1_ps(k.beta1), omb1 = _mm512_set1_ps(k.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(k.beta2), omb2 = _mm512_set1_ps(k.one_minus_beta2);
  const __m512 step = _mm512_set1_ps(k.step_size), bc2 = _mm512_set1_ps(k.bc2_sqrt);
  const __m512 eps = _mm512_set1_ps(k.eps);
  // The same operations, in the same order, as the portable loop (elementwise.cpp); no FMA
  // contraction, so that both paths round alike.
  auto update = [&](__mmask16 mask, int64_t i) {
    const __m512 gi = _mm512_maskz_loadu_ps(mask, g + i);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(mask, m + i)),
                                    _mm512_mul_ps(omb1, gi));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(mask, v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    _mm512_mask_storeu_ps(m + i, mask, mi);
    _mm512_mask_storeu_ps(v + i, mask, vi);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    const __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, param + i), decay),
                                    _mm512_div_ps(_mm512_mul_ps(step, mi), denom));
    _mm512_mask_storeu_ps(param + i, mask, pi);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) update(0xFFFF, i);
  if (i < n) update(tail_mask(n - i), i);
}

namespace {

// hash_mix32 (forge/ops.h) on 16 lanes.
inline __m512i mix16(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x7feb352dU)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x846ca68bU)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

}  // namespace

void dropout_avx512(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                    uint32_t threshold, float scale) {
  const __m512i seed_lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(seed)));
  const __m512i seed_hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(seed >> 32)));
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // Compared as unsigned 32-bit: hash >> 8 >= threshold.
  const __m512i thr = _mm512_set1_epi32(static_cast<int>(threshold));
  const __m512 k = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t len = n - i < 16 ? n - i : 16;
    const uint64_t first = index0 + static_cast<uint64_t>(i);
    const uint64_t last = first + static_cast<uint64_t>(len - 1);
    if ((first >> 32) != (last >> 32)) {
      // The high index word changes inside this vector (once per 2^32 elements): scalar.
      for (int64_t j = i; j < i + len; ++j) {
        const bool keep = (dropout_hash(seed, index0 + static_cast<uint64_t>(j)) >> 8) >= threshold;
        y[j] = keep ? x[j] * scale : 0.0f;
      }
      continue;
    }
    const __mmask16 m = len == 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(len);
    // dropout_hash: h = mix(lo(i) ^ lo(seed)); h = mix(h ^ hi(seed) ^ hi(i) * golden)
    const __m512i lo =
        _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first))), iota);
    const uint32_t hi_term = static_cast<uint32_t>(first >> 32) * 0x9E3779B9U;
    __m512i h = mix16(_mm512_xor_si512(lo, seed_lo));
    h = mix16(_mm512_xor_si512(_mm512_xor_si512(h, seed_hi),
                               _mm512_set1_epi32(static_cast<int>(hi_term))));
    const __mmask16 keep = _mm512_mask_cmpge_epu32_mask(m, _mm512_srli_epi32(h, 8), thr);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_maskz_mul_ps(keep, v, k));
  }
}

}  // namespace forge::cpu
