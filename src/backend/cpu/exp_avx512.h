// Vector exp for the AVX-512 span kernels. Include only from *_avx512.cpp files (they are
// compiled with -mavx512f and friends; nothing else is).
#pragma once

// GCC 12's own intrinsics (max, min, roundscale, scalef) start from _mm512_undefined_ps(),
// which it then reports as "(may be) used uninitialized" (GCC bug 105593, fixed in 13).
// Silenced for the including file; include this header before <immintrin.h>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

namespace forge::cpu {

/// exp of 16 floats, relative error < 2e-7: the same reduction and polynomial as exp_fast
/// (vec_kernels.h), with scalef doing 2^n so that the result underflows to 0 / overflows
/// to inf like expf. NaN propagates (max/min return their second operand on NaN).
static inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/// Mask of the first `rem` lanes (0 <= rem < 16): for loop tails.
static inline __mmask16 tail_mask(int64_t rem) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(rem)) - 1u);
}

}  // namespace forge::cpu
