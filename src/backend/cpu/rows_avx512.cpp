// AVX-512 span kernels for the row ops: softmax, logsumexp and LayerNorm rows (see
// vec_kernels.h).
#include "backend/cpu/exp_avx512.h"  // first: it must precede <immintrin.h>

#include <cmath>
#include <limits>

#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {

namespace {

// Max of x[0, n), four accumulators to hide the max latency; n >= 1.
float row_max16(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + i + 32));
    m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i));
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

// sum(exp(x[0, n) - mx)) in double; n >= 1.
double expsum_double(const float* x, int64_t n, float mx) {
  const __m512 vmax = _mm512_set1_ps(mx);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  auto accumulate = [&](__m512 e) {
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) accumulate(exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    accumulate(
        _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

}  // namespace

float logsumexp_avx512(const float* x, int64_t n) {
  const float mx = row_max16(x, n);
  if (!std::isfinite(mx)) return mx;  // -inf (all -inf), +inf or NaN is also the answer
  // Summed in double: a vocabulary row has ~50k terms, and the loss wants ~1e-6 relative.
  // A 200 KB row stays in L2 between the two passes, so it is read from memory once.
  return mx + static_cast<float>(std::log(expsum_double(x, n, mx)));
}

void softmax_row_avx512(const float* x, float* y, int64_t n, float scale) {
  const __m512 vmax = _mm512_set1_ps(row_max16(x, n));
  // y = exp(x - max), summed on the way (two accumulators: 32 partial sums per row).
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    const __m512 e1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vmax));
    _mm512_storeu_ps(y + i, e0);
    _mm512_storeu_ps(y + i + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    _mm512_storeu_ps(y + i, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax));
    _mm512_mask_storeu_ps(y + i, m, e);
    s1 = _mm512_mask_add_ps(s1, m, s1, e);
  }
  const float sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  const __m512 k = _mm512_set1_ps(scale / sum);
  i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), k));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), k));
  }
}

void layernorm_row_avx512(const float* x, const float* gamma, const float* beta, float eps,
                          float* y, int64_t C) {
  // Two passes over the row (it is in L1): the mean, then the biased variance around it,
  // which avoids the cancellation of E[x^2] - E[x]^2.
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= C; i += 32) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i + 16 <= C; i += 16) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
  if (i < C) a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(tail_mask(C - i), x + i));
  const float mean = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) / static_cast<float>(C);
  const __m512 vmean = _mm512_set1_ps(mean);

  a0 = _mm512_setzero_ps();
  a1 = _mm512_setzero_ps();
  i = 0;
  for (; i + 32 <= C; i += 32) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), vmean);
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vmean);
    a0 = _mm512_fmadd_ps(d0, d0, a0);
    a1 = _mm512_fmadd_ps(d1, d1, a1);
  }
  for (; i + 16 <= C; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vmean);
    a0 = _mm512_fmadd_ps(d, d, a0);
  }
  if (i < C) {
    const __mmask16 m = tail_mask(C - i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vmean);
    a1 = _mm512_fmadd_ps(d, d, a1);
  }
  const float var = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) / static_cast<float>(C);
  const __m512 rstd = _mm512_set1_ps(1.0f / std::sqrt(var + eps));

  i = 0;
  for (; i + 16 <= C; i += 16) {
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmean), rstd);
    _mm512_storeu_ps(y + i,
                     _mm512_fmadd_ps(xhat, _mm512_loadu_ps(gamma + i), _mm512_loadu_ps(beta + i)));
  }
  if (i < C) {
    const __mmask16 m = tail_mask(C - i);
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmean), rstd);
    _mm512_mask_storeu_ps(y + i, m,
                          _mm512_fmadd_ps(xhat, _mm512_maskz_loadu_ps(m, gamma + i),
                                          _mm512_maskz_loadu_ps(m, beta + i)));
  }
}

}  // namespace forge::cpu
