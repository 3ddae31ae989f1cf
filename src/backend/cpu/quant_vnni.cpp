// AVX-512 VNNI kernels of the quantized products (quant.h). A weight block's 32 values become
// unsigned bytes (int8 + 128, or the Q4_0 nibbles as they are), and vpdpbusd multiplies them
// with the signed activation bytes; the offset times the activation block's sum (kept by the
// rounding) starts the integer accumulator, so each block's lanes add up to the exact dot.
#include "backend/cpu/quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "backend/cpu/simd.h"

namespace forge::cpu::quant {
namespace {

void quantize(const float* x, int64_t K, int8_t* q, float* d, int32_t* s) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * kBlock);
    const __m512 x1 = _mm512_loadu_ps(x + b * kBlock + 16);
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    const float db = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(db > 0.0f ? 1.0f / db : 0.0f);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    // cvtps rounds half to even (the default MXCSR mode) and gives INT_MIN for NaN.
    const __m512i q0 =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), lo), hi);
    const __m512i q1 =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kBlock), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kBlock + 16), _mm512_cvtepi32_epi8(q1));
    d[b] = db;
    s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

float scale_of(const std::byte* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return _cvtsh_ss(h);
}

// The weight block's 32 values as unsigned bytes (value + offset), in element order.
template <WeightType kType>
inline __m256i weight_bytes(const std::byte* wb) {
  if constexpr (kType == kQ8_0) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2));
    return _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2));
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
  }
}

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// Two consecutive blocks of a weight row as one zmm of unsigned bytes (block b in the low
// half), and their two f16 scales as [d_b x 8 | d_b+1 x 8].
template <WeightType kType>
inline __m512i weight_pair(const std::byte* wb) {
  constexpr size_t kBytes = kType == kQ8_0 ? 34 : 18;
  return _mm512_inserti64x4(_mm512_castsi256_si512(weight_bytes<kType>(wb)),
                            weight_bytes<kType>(wb + kBytes), 1);
}
template <WeightType kType>
inline __m512 scale_pair(const std::byte* wb) {
  constexpr size_t kBytes = kType == kQ8_0 ? 34 : 18;
  uint16_t h0, h1;
  std::memcpy(&h0, wb, 2);
  std::memcpy(&h1, wb + kBytes, 2);
  const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(static_cast<short>(h0))),
                                            _mm_set1_epi16(static_cast<short>(h1)), 1);
  return _mm512_cvtph_ps(h);
}

// Per activation row, per pair of blocks: the accumulator's start (the offset correction of
// each block in its half's first lane) and the scales [d_b x 8 | d_b+1 x 8].
struct PairRows {
  std::vector<int32_t> init;  // 16 per pair
  std::vector<float> d;       // 16 per pair
};
thread_local PairRows t_pairs;

template <WeightType kType, int kM>
void dots_m(const Rows& a, const std::byte* w, size_t row_bytes, int64_t j0, int64_t j1, float* c,
            int64_t ldc) {
  constexpr size_t kBytes = kType == kQ8_0 ? 34 : 18;
  constexpr int32_t kOffset = kType == kQ8_0 ? 128 : 8;
  const int64_t pairs = a.kb / 2;
  PairRows& pr = t_pairs;
  pr.init.resize(static_cast<size_t>(kM * pairs * 16));
  pr.d.resize(static_cast<size_t>(kM * pairs * 16));
  for (int r = 0; r < kM; ++r)
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t i = r * a.kb + 2 * p;
      const __m512i lo = _mm512_zextsi128_si512(_mm_cvtsi32_si128(-kOffset * a.s[i]));
      _mm512_storeu_si512(pr.init.data() + (r * pairs + p) * 16,
                          _mm512_inserti32x4(lo, _mm_cvtsi32_si128(-kOffset * a.s[i + 1]), 2));
      _mm512_storeu_ps(pr.d.data() + (r * pairs + p) * 16,
                       _mm512_insertf32x8(_mm512_set1_ps(a.d[i]), _mm256_set1_ps(a.d[i + 1]), 1));
    }
  for (int64_t j = j0; j < j1; ++j) {
    const std::byte* wj = w + static_cast<size_t>(j) * row_bytes;
    __m512 acc[kM];
#pragma GCC unroll 4
    for (int r = 0; r < kM; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
      const std::byte* wb = wj + static_cast<size_t>(2 * p) * kBytes;
      const __m512i wv = weight_pair<kType>(wb);
      const __m512 dw = scale_pair<kType>(wb);
#pragma GCC unroll 4
      for (int r = 0; r < kM; ++r) {
        const __m512i qa =
            _mm512_loadu_si512(reinterpret_cast<const void*>(a.q + r * a.K + 2 * p * kBlock));
        const size_t at = static_cast<size_t>((r * pairs + p) * 16);
        const __m512i iv = _mm512_dpbusd_epi32(_mm512_loadu_si512(pr.init.data() + at), wv, qa);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iv),
                                 _mm512_mul_ps(dw, _mm512_loadu_ps(pr.d.data() + at)), acc[r]);
      }
    }
    float tail[kM] = {};
    if (a.kb % 2) {  // the last block alone
      const int64_t b = a.kb - 1;
      const std::byte* wb = wj + static_cast<size_t>(b) * kBytes;
      const __m256i wv = weight_bytes<kType>(wb);
      const float dw = scale_of(wb);
#pragma GCC unroll 4
      for (int r = 0; r < kM; ++r) {
        const int64_t i = r * a.kb + b;
        const __m256i qa =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + r * a.K + b * kBlock));
        const __m256i init = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-kOffset * a.s[i]));
        const __m256i iv = _mm256_dpbusd_epi32(init, wv, qa);
        tail[r] = hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(iv), _mm256_set1_ps(dw * a.d[i])));
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kM; ++r) c[r * ldc + j] = _mm512_reduce_add_ps(acc[r]) + tail[r];
  }
}

template <WeightType kType>
void dots(int m, const Rows& a, const std::byte* w, size_t row_bytes, int64_t j0, int64_t j1,
          float* c, int64_t ldc) {
  switch (m) {
    case 1: return dots_m<kType, 1>(a, w, row_bytes, j0, j1, c, ldc);
    case 2: return dots_m<kType, 2>(a, w, row_bytes, j0, j1, c, ldc);
    case 3: return dots_m<kType, 3>(a, w, row_bytes, j0, j1, c, ldc);
    default: return dots_m<kType, 4>(a, w, row_bytes, j0, j1, c, ldc);
  }
}

}  // namespace

const Kernels* kernels_vnni() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return simd_level() == SimdLevel::Avx512 && __builtin_cpu_supports("avx512vnni");
  }();
  static const Kernels k{"avx512-vnni", quantize, {dots<kQ8_0>, dots<kQ4_0>}};
  return ok ? &k : nullptr;
}

}  // namespace forge::cpu::quant

#else

namespace forge::cpu::quant {
const Kernels* kernels_vnni() { return nullptr; }
}  // namespace forge::cpu::quant

#endif
