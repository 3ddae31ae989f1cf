// AVX2 kernels of the quantized products (quant.h): the rounding of activation blocks, and
// the block dot products of Q8_0 / Q4_0 weight rows with up to kMaxRows activation rows.
// vpmaddubsw multiplies a weight block's bytes, as unsigned, with the activation bytes: for
// Q8_0 |w| with the activations given w's sign, for Q4_0 the nibbles (w + 8) as they are,
// the offset 8 times the activation block's sum taken off afterwards. vpmaddwd with ones
// widens the pairs to int32 lanes, and each group of 8 blocks is summed down to one int32 per
// block before it is scaled in f32, so every block's dot is exact.
#include "backend/cpu/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/simd.h"

namespace forge::cpu::quant {
namespace {

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 1));
  return _mm_cvtsi128_si32(x);
}

void quantize(const float* x, int64_t K, int8_t* q, float* d, int32_t* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  // packs works within 128-bit lanes; this puts the four 8-value groups back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    __m256 xv[4];
    // maxps returns its second operand when either is NaN: with the running max second, a
    // NaN value is skipped, as std::max(amax, |x|) in the portable kernel skips it.
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      xv[i] = _mm256_loadu_ps(xb + 8 * i);
      m = _mm256_max_ps(_mm256_andnot_ps(sign, xv[i]), m);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float db = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(db > 0.0f ? 1.0f / db : 0.0f);
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) {
      // Clamped in float before the conversion: maxps with -127 second maps NaN to -127, and
      // +-inf (id = inf for a subnormal d) to +-127 rather than cvtps's INT_MIN. Clamping
      // to integers commutes with the rounding, so this is the portable kernel's order.
      const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(xv[i], id), lo), hi);
      qi[i] = _mm256_cvtps_epi32(v);  // half to even (the default MXCSR mode)
    }
    const __m256i q16 =
        _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock),
                        _mm256_permutevar8x32_epi32(q16, order));
    d[b] = db;
    s[b] = hsum_epi32(
        _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3])));
  }
}

// A weight block's 32 values as bytes, in element order: Q8_0's int8 values, or Q4_0's
// nibbles 0..15 (the value + 8).
template <WeightType kType>
inline __m256i weight_bytes(const std::byte* wb) {
  if constexpr (kType == kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2));
  } else {
    // ggml's Q4_0: byte i holds element i in its low nibble and element i + 16 in its high
    // one. The 16 bytes go to both halves; the upper half shifts right by 4 to its nibbles.
    const __m256i v =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2)));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                            _mm256_set1_epi8(0x0F));
  }
}

// The f16 scales of n <= 8 consecutive weight blocks as f32 lanes (0 past n).
template <WeightType kType, bool kFull>
inline __m256 group_scales(const std::byte* wb, int n) {
  constexpr size_t kBytes = kType == kQ8_0 ? 34 : 18;
  uint16_t h[8] = {};
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    if (kFull || i < n) std::memcpy(&h[i], wb + i * kBytes, 2);
  return _mm256_cvtph_ps(_mm_setr_epi16(static_cast<short>(h[0]), static_cast<short>(h[1]),
                                        static_cast<short>(h[2]), static_cast<short>(h[3]),
                                        static_cast<short>(h[4]), static_cast<short>(h[5]),
                                        static_cast<short>(h[6]), static_cast<short>(h[7])));
}

// The mask of lanes [0, n), n <= 8.
inline __m256i lanes(int n) {
  alignas(32) static constexpr int kTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                 0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTable + 8 - n));
}

// One block of weight bytes u (weight_bytes) against activations qa: eight int32 lanes
// whose sum is sum_i u_i * q_i.
//  Q8_0: vpmaddubsw takes |w| as unsigned bytes (0x80, -128, as 128) and q * sign(w), whose
//        products are w * q; a pair is at most 2 * 128 * 127 < 2^15 in magnitude since the
//        rounding keeps q in [-127, 127], so it never saturates, for every int8 w.
//  Q4_0: the nibbles are unsigned already (a pair is at most 2 * 15 * 127): the lanes sum
//        to dot + 8 * s, the offset taken off once per group.
template <WeightType kType>
inline __m256i block_lanes(__m256i u, __m256i u_abs, const int8_t* qa) {
  __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa));
  if constexpr (kType == kQ8_0) {
    qv = _mm256_sign_epi8(qv, u);
    u = u_abs;
  }
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, qv), _mm256_set1_epi16(1));
}

// Per activation row: its values, block scales and block sums from the current block on.
template <int kM>
struct RowPtrs {
  const int8_t* q[kM];
  const float* d[kM];
  const int32_t* s[kM];
};

// A group of n <= 8 consecutive blocks (8 unless !kFull) of one weight row against kM rows:
// acc[r] lane i += (dw_i * d_i) * dot_i. The eight lanes of each block's dot are summed in
// int32 (vphaddd trees, then one cross-half add), so each block's dot is exact before it
// meets a float, and one conversion and one fma serve eight blocks. Row r's arithmetic is
// the same for every kM, so a row's result does not depend on the rows computed with it.
template <WeightType kType, int kM, bool kFull>
inline void group(const std::byte* wb, int n, const RowPtrs<kM>& rp, __m256* acc) {
  constexpr size_t kBytes = kType == kQ8_0 ? 34 : 18;
  __m256i pair[kM], quad[2][kM];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const int i = 2 * p;
    const bool has0 = kFull || i < n, has1 = kFull || i + 1 < n;
    const __m256i u0 = has0 ? weight_bytes<kType>(wb + i * kBytes) : _mm256_setzero_si256();
    const __m256i u1 = has1 ? weight_bytes<kType>(wb + (i + 1) * kBytes) : _mm256_setzero_si256();
    const __m256i a0 = kType == kQ8_0 ? _mm256_abs_epi8(u0) : u0;
    const __m256i a1 = kType == kQ8_0 ? _mm256_abs_epi8(u1) : u1;
#pragma GCC unroll 4
    for (int r = 0; r < kM; ++r) {
      // Past n the activations are not read: their rows may end there.
      const __m256i v0 =
          has0 ? block_lanes<kType>(u0, a0, rp.q[r] + i * kBlock) : _mm256_setzero_si256();
      const __m256i v1 =
          has1 ? block_lanes<kType>(u1, a1, rp.q[r] + (i + 1) * kBlock) : _mm256_setzero_si256();
      const __m256i h = _mm256_hadd_epi32(v0, v1);
      if (p % 2 == 0) {
        pair[r] = h;
      } else {
        quad[p / 2][r] = _mm256_hadd_epi32(pair[r], h);
      }
    }
  }
  const __m256 dw = group_scales<kType, kFull>(wb, n);
#pragma GCC unroll 4
  for (int r = 0; r < kM; ++r) {
    // quad[k] holds, per 128-bit half, the half-sums of blocks 4k .. 4k+3.
    __m256i dots = _mm256_add_epi32(_mm256_blend_epi32(quad[0][r], quad[1][r], 0xF0),
                                    _mm256_permute2x128_si256(quad[0][r], quad[1][r], 0x21));
    if constexpr (kType == kQ4_0) {
      const __m256i sv = kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp.s[r]))
                               : _mm256_maskload_epi32(rp.s[r], lanes(n));
      dots = _mm256_sub_epi32(dots, _mm256_slli_epi32(sv, 3));
    }
    const __m256 da = kFull ? _mm256_loadu_ps(rp.d[r]) : _mm256_maskload_ps(rp.d[r], lanes(n));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(dw, da), acc[r]);
  }
}

template <WeightType kType, int kM>
void dots_m(const Rows& a, const std::byte* w, size_t row_bytes, int64_t j0, int64_t j1, float* c,
            int64_t ldc) {
  constexpr size_t kBytes = kType == kQ8_0 ? 34 : 18;
  for (int64_t j = j0; j < j1; ++j) {
    const std::byte* wj = w + static_cast<size_t>(j) * row_bytes;
    RowPtrs<kM> rp;
    __m256 acc[kM];
#pragma GCC unroll 4
    for (int r = 0; r < kM; ++r) {
      acc[r] = _mm256_setzero_ps();
      rp.q[r] = a.q + r * a.K;
      rp.d[r] = a.d + r * a.kb;
      rp.s[r] = a.s + r * a.kb;
    }
    int64_t b = 0;
    for (; b + 8 <= a.kb; b += 8) {
      group<kType, kM, true>(wj + static_cast<size_t>(b) * kBytes, 8, rp, acc);
#pragma GCC unroll 4
      for (int r = 0; r < kM; ++r) rp.q[r] += 8 * kBlock, rp.d[r] += 8, rp.s[r] += 8;
    }
    if (b < a.kb)
      group<kType, kM, false>(wj + static_cast<size_t>(b) * kBytes, static_cast<int>(a.kb - b), rp,
                              acc);
#pragma GCC unroll 4
    for (int r = 0; r < kM; ++r) c[r * ldc + j] = hsum(acc[r]);
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

const Kernels* kernels_avx2() {
  static const bool ok = simd_level() >= SimdLevel::Avx2;
  static const Kernels k{"avx2", quantize, {dots<kQ8_0>, dots<kQ4_0>}};
  return ok ? &k : nullptr;
}

}  // namespace forge::cpu::quant

#else  // this build does not compile AVX2

namespace forge::cpu::quant {
const Kernels* kernels_avx2() { return nullptr; }
}  // namespace forge::cpu::quant

#endif
