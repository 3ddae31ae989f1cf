// AVX-512 span kernel for the loss rows: logsumexp (see vec_kernels.h).
#include "backend/cpu/exp_avx512.h"  // first: it must precede <immintrin.h>

#include <cmath>
#include <limits>

#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {

float logsumexp_avx512(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i));
  const float mx = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  // A max of -inf (all -inf), +inf or NaN is also the logsumexp.
  if (!std::isfinite(mx)) return mx;
  const __m512 vmax = _mm512_set1_ps(mx);
  // Summed in double: a vocabulary row has ~50k terms, and the loss wants ~1e-6 relative.
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  auto accumulate = [&](__m512 e) {
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  };
  i = 0;
  for (; i + 16 <= n; i += 16) accumulate(exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    accumulate(
        _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax))));
  }
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  return mx + static_cast<float>(std::log(sum));
}

}  // namespace forge::cpu
