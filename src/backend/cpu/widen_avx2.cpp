// widen() with F16C / AVX2: 8 values per instruction (gemm.h).
#include "backend/cpu/gemm.h"
#include "io/half.h"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

namespace forge::cpu::gemm {

void widen_avx2(BType t, const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  if (t == BType::bf16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i,
                       _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; ++i) dst[i] = io::bf16_to_f32(src[i]);
  } else {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; ++i) dst[i] = io::f16_to_f32(src[i]);
  }
}

}  // namespace forge::cpu::gemm

#else

namespace forge::cpu::gemm {
void widen_avx2(BType t, const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = t == BType::bf16 ? io::bf16_to_f32(src[i]) : io::f16_to_f32(src[i]);
}
}  // namespace forge::cpu::gemm

#endif
