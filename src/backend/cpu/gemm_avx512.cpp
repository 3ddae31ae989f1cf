// AVX-512 GEMM kernels: a 14 x 32 micro-kernel (28 zmm accumulators, broadcast-FMA), packing
// with in-register 16 x 16 transposes for the transposed layouts, and the small-m streaming
// kernels. Edges use masked loads and stores; nothing here touches memory outside the ranges
// the Kernels contract in gemm.h names.
#include "backend/cpu/gemm.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__)

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source, which
// -Wuninitialized flags once inlined (GCC bug 105593): silence it for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

namespace forge::cpu::gemm {
namespace {

constexpr int kMR = 14;
constexpr int kNR = 32;
constexpr __mmask16 kRowMask = (1u << kMR) - 1;  // the kMR lanes of one packed A column

// Lanes [0, n) set, n clamped to [0, 16].
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// In-place transpose of a 16 x 16 block held as 16 rows: afterwards r[c] is column c.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // s[4i + q], 128-bit lane L: column 4L + q of rows 4i .. 4i+3.
  __m512 s[16];
  for (int i = 0; i < 16; i += 4) {
    const __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
    s[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    s[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    s[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    s[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int q = 0; q < 4; ++q) {
    const __m512 x0 = _mm512_shuffle_f32x4(s[q], s[4 + q], 0x44);
    const __m512 x1 = _mm512_shuffle_f32x4(s[q], s[4 + q], 0xEE);
    const __m512 y0 = _mm512_shuffle_f32x4(s[8 + q], s[12 + q], 0x44);
    const __m512 y1 = _mm512_shuffle_f32x4(s[8 + q], s[12 + q], 0xEE);
    r[q] = _mm512_shuffle_f32x4(x0, y0, 0x88);
    r[4 + q] = _mm512_shuffle_f32x4(x0, y0, 0xDD);
    r[8 + q] = _mm512_shuffle_f32x4(x1, y1, 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(x1, y1, 0xDD);
  }
}

// Loads a rows x kn block (row stride ld) as 16 zero-padded rows and transposes it, so that
// r[k] holds element k of every row.
inline void load_transposed(const float* src, int64_t ld, int64_t rows, int64_t kn, __m512 r[16]) {
  const __mmask16 km = lanes(kn);
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * ld) : _mm512_setzero_ps();
  transpose16(r);
}

void pack_a(const float* a, int64_t lda, bool trans_a, int64_t i0, int64_t k0, int64_t mc,
            int64_t kc, float* dst) {
  for (int64_t p = 0; p < mc; p += kMR) {
    const int64_t rows = std::min<int64_t>(kMR, mc - p);
    float* d = dst + p * kc;
    if (trans_a) {  // a is [K, M]: each k gives kMR contiguous values of one packed column
      const __mmask16 rm = lanes(rows);
      const float* src = a + k0 * lda + i0 + p;
      for (int64_t k = 0; k < kc; ++k)
        _mm512_mask_storeu_ps(d + k * kMR, kRowMask, _mm512_maskz_loadu_ps(rm, src + k * lda));
    } else {  // a is [M, K]: transpose 16 x 16 blocks (rows past `rows` are zero)
      const float* src = a + (i0 + p) * lda + k0;
      for (int64_t kk = 0; kk < kc; kk += 16) {
        const int64_t kn = std::min<int64_t>(16, kc - kk);
        __m512 r[16];
        load_transposed(src + kk, lda, rows, kn, r);
        for (int64_t k = 0; k < kn; ++k) _mm512_mask_storeu_ps(d + (kk + k) * kMR, kRowMask, r[k]);
      }
    }
  }
}

void pack_b(const float* b, int64_t ldb, bool trans_b, int64_t k0, int64_t j0, int64_t nc,
            int64_t kc, float* dst) {
  for (int64_t q = 0; q < nc; q += kNR) {
    const int64_t cols = std::min<int64_t>(kNR, nc - q);
    float* d = dst + q * kc;
    if (!trans_b) {  // b is [K, N]: a panel row is 32 contiguous values
      const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16);
      const float* src = b + k0 * ldb + j0 + q;
      for (int64_t k = 0; k < kc; ++k) {
        const float* s = src + k * ldb;
        _mm512_store_ps(d + k * kNR, _mm512_maskz_loadu_ps(m0, s));
        _mm512_store_ps(d + k * kNR + 16, _mm512_maskz_loadu_ps(m1, s + 16));
      }
    } else {  // b is [N, K]: 16 stored rows x 16 k at a time, transposed
      for (int g = 0; g < 2; ++g) {
        const int64_t gcols = std::clamp<int64_t>(cols - 16 * g, 0, 16);
        const float* src = b + (j0 + q + 16 * g) * ldb + k0;
        for (int64_t kk = 0; kk < kc; kk += 16) {
          const int64_t kn = std::min<int64_t>(16, kc - kk);
          __m512 r[16];
          load_transposed(src + kk, ldb, gcols, kn, r);
          for (int64_t k = 0; k < kn; ++k) _mm512_store_ps(d + (kk + k) * kNR + 16 * g, r[k]);
        }
      }
    }
  }
}

// C tile [kRows, cols] = alpha * PA @ PB (+ bias) (+ C). The 2 * kRows accumulators live in
// registers; every k step loads one 32-wide row of the B panel and broadcasts kRows values
// of the A panel.
template <int kRows>
void micro(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t cols,
           float alpha, const float* bias, bool accumulate) {
  __m512 acc[kRows][2];
  // The C tile is read (accumulate) and written only after the k loop; fetching its lines
  // now hides their cache misses behind the loop (C rows are far apart: no streaming).
#pragma GCC unroll 14
  for (int r = 0; r < kRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + cols - 1), _MM_HINT_T0);
  }
#pragma GCC unroll 14
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(pb);
    const __m512 b1 = _mm512_load_ps(pb + 16);
#pragma GCC unroll 14
    for (int r = 0; r < kRows; ++r) {
      const __m512 av = _mm512_set1_ps(pa[r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
    pa += kMR;
    pb += kNR;
  }
  const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16);
  const __m512 va = _mm512_set1_ps(alpha);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (bias) {
    bias0 = _mm512_maskz_loadu_ps(m0, bias);
    bias1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
#pragma GCC unroll 14
  for (int r = 0; r < kRows; ++r) {
    float* cr = c + r * ldc;
    __m512 x0 = _mm512_fmadd_ps(acc[r][0], va, bias0);
    __m512 x1 = _mm512_fmadd_ps(acc[r][1], va, bias1);
    if (accumulate) {
      x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m0, cr));
      x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(m1, cr + 16));
    }
    _mm512_mask_storeu_ps(cr, m0, x0);
    _mm512_mask_storeu_ps(cr + 16, m1, x1);
  }
}

constexpr MicroFn kMicro[kMR + 1] = {nullptr,   micro<1>,  micro<2>,  micro<3>,  micro<4>,
                                     micro<5>,  micro<6>,  micro<7>,  micro<8>,  micro<9>,
                                     micro<10>, micro<11>, micro<12>, micro<13>, micro<14>};

void macro(int64_t mc, int64_t nc, int64_t kc, const float* pa, const float* pb, float* c,
           int64_t ldc, float alpha, const float* bias, bool accumulate) {
  macro_tiles<kMR, kNR>(kMicro, mc, nc, kc, pa, pb, c, ldc, alpha, bias, accumulate);
}

// ---- small m ---------------------------------------------------------------------------------

// Accumulator floats of rows_n (16 KiB, in L1): kM rows of kAccCols<kM> columns, each row
// a whole number of vectors so that every row stays aligned.
constexpr int64_t kAccFloats = 4096;
template <int kM>
constexpr int64_t kAccCols = kAccFloats / kM / 16 * 16;

// Folds kKU rows of b [K, N] (from row k) into the accumulators acc[r][0 : w].
template <int kM, int kKU>
inline void fold_rows(float (&acc)[kM][kAccCols<kM>], const float* a, int64_t lda, const float* bk,
                      int64_t ldb, int64_t k, int64_t w) {
  __m512 av[kM][kKU];
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < kKU; ++i) av[r][i] = _mm512_set1_ps(a[r * lda + k + i]);
  for (int64_t o = 0; o < w; o += 16) {
    const __mmask16 m = lanes(w - o);
    __m512 x[kKU];
#pragma GCC unroll 4
    for (int i = 0; i < kKU; ++i) {
      __builtin_prefetch(bk + (2 * kKU + i) * ldb + o, 0, 2);  // see gemm.h
      x[i] = _mm512_maskz_loadu_ps(m, bk + i * ldb + o);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kM; ++r) {
      __m512 s = _mm512_load_ps(acc[r] + o);
#pragma GCC unroll 4
      for (int i = 0; i < kKU; ++i) s = _mm512_fmadd_ps(av[r][i], x[i], s);
      _mm512_store_ps(acc[r] + o, s);
    }
  }
}

// out[0:kM, jc:jc+w] for b [K, N]: a few B rows at a time stream through (contiguous, one
// load per 16 columns each) and are folded into the L1-resident accumulators.
template <int kM>
void rows_n_chunk(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t jc,
                  int64_t w, float* c, int64_t ldc, float alpha, const float* bias) {
  constexpr int kKU = 4;
  alignas(64) float acc[kM][kAccCols<kM>];
  const int64_t padded = (w + 15) / 16 * 16;
  for (int r = 0; r < kM; ++r) std::fill(acc[r], acc[r] + padded, 0.0f);
  const float* bc = b + jc;
  int64_t k = 0;
  for (; k + kKU <= K; k += kKU) fold_rows<kM, kKU>(acc, a, lda, bc + k * ldb, ldb, k, w);
  for (; k < K; ++k) fold_rows<kM, 1>(acc, a, lda, bc + k * ldb, ldb, k, w);
  const __m512 va = _mm512_set1_ps(alpha);
  for (int r = 0; r < kM; ++r) {
    for (int64_t o = 0; o < w; o += 16) {
      const __mmask16 m = lanes(w - o);
      const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + jc + o) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(c + r * ldc + jc + o, m,
                            _mm512_fmadd_ps(_mm512_load_ps(acc[r] + o), va, bv));
    }
  }
}

template <int kM>
void rows_n_m(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t j0,
              int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  for (int64_t jc = j0; jc < j1; jc += kAccCols<kM>)
    rows_n_chunk<kM>(K, a, lda, b, ldb, jc, std::min(kAccCols<kM>, j1 - jc), c, ldc, alpha, bias);
}

void rows_n(int m, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t j0,
            int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  switch (m) {
    case 1: return rows_n_m<1>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    case 2: return rows_n_m<2>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    case 3: return rows_n_m<3>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    default: return rows_n_m<4>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
  }
}

// Sum of the 16 lanes (a fixed order, so results do not depend on the thread count).
inline float hsum(__m512 v) {
  const __m512 s = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  const __m256 h = _mm512_castps512_ps256(s);
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// B loads of the streaming dot kernels: 16 values (masked) as f32, from f32, f16 or bf16.
struct LoadF32 {
  using T = float;
  static __m512 load(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadF16 {
  using T = uint16_t;
  static __m512 load(__mmask16 m, const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct LoadBF16 {
  using T = uint16_t;
  static __m512 load(__mmask16 m, const uint16_t* p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
};

// One 16-wide k step of dots(): kRB rows of b against kM rows of a.
template <class L, int kM, int kRB>
inline void dot_step(__m512 (&acc)[kM][kRB], const float* a, int64_t lda, const typename L::T* bj,
                     int64_t ldb, int64_t k, __mmask16 m) {
  __m512 bv[kRB];
#pragma GCC unroll 8
  for (int q = 0; q < kRB; ++q) bv[q] = L::load(m, bj + q * ldb + k);
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r) {
    const __m512 av = _mm512_maskz_loadu_ps(m, a + r * lda + k);
#pragma GCC unroll 8
    for (int q = 0; q < kRB; ++q) acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
  }
}

// kRB rows of b [N, K] against kM rows of a: kM * kRB dot products with one accumulator
// each (8 or more independent FMA chains hide the FMA latency).
template <class L, int kM, int kRB>
void dots(int64_t K, const float* a, int64_t lda, const typename L::T* bj, int64_t ldb, float* c,
          int64_t ldc, int64_t j, float alpha, const float* bias) {
  __m512 acc[kM][kRB];
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < kRB; ++q) acc[r][q] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    prefetch_next_rows<kRB>(bj, ldb, k);
    dot_step<L, kM, kRB>(acc, a, lda, bj, ldb, k, 0xFFFF);
  }
  if (k < K) dot_step<L, kM, kRB>(acc, a, lda, bj, ldb, k, lanes(K - k));
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < kRB; ++q)
      c[r * ldc + j + q] = alpha * hsum(acc[r][q]) + (bias ? bias[j + q] : 0.0f);
}

template <class L, int kM, int kRB>
void rows_t_m(int64_t K, const float* a, int64_t lda, const typename L::T* b, int64_t ldb,
              int64_t j0, int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  int64_t j = j0;
  for (; j + kRB <= j1; j += kRB)
    dots<L, kM, kRB>(K, a, lda, b + j * ldb, ldb, c, ldc, j, alpha, bias);
  for (; j < j1; ++j) dots<L, kM, 1>(K, a, lda, b + j * ldb, ldb, c, ldc, j, alpha, bias);
}

template <class L>
void rows_t_of(int m, int64_t K, const float* a, int64_t lda, const typename L::T* b, int64_t ldb,
               int64_t j0, int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  switch (m) {
    case 1: return rows_t_m<L, 1, 8>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    case 2: return rows_t_m<L, 2, 4>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    case 3: return rows_t_m<L, 3, 4>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    default: return rows_t_m<L, 4, 4>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
  }
}

constexpr auto rows_t = rows_t_of<LoadF32>;
constexpr auto rows_t_f16 = rows_t_of<LoadF16>;
constexpr auto rows_t_bf16 = rows_t_of<LoadBF16>;

}  // namespace

const Kernels* kernels_avx512() {
  // kc: a 14 x 384 A micro-panel (21 KiB) and the 384 x 32 B micro-panel (48 KiB) stream
  // from L2; mc: a 168 x 384 A block (252 KiB) stays in L2; nc: a 384 x 1024 B panel
  // (1.5 MiB) in L3.
  static const Kernels k{"avx512", kMR,    kNR,   384,    14 * 12, 1024,
                         pack_a,   pack_b, macro, rows_n, rows_t,  {rows_t_f16, rows_t_bf16}};
  return &k;
}

}  // namespace forge::cpu::gemm

#else  // this build does not compile AVX-512

namespace forge::cpu::gemm {
const Kernels* kernels_avx512() { return nullptr; }
}  // namespace forge::cpu::gemm

#endif
