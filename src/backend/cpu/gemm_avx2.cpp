// AVX2 + FMA GEMM kernels: a 6 x 16 micro-kernel (12 ymm accumulators, broadcast-FMA),
// packing with in-register 8 x 8 transposes for the transposed layouts, and the small-m
// streaming kernels. Edges use masked loads and stores (vmaskmov), never reading or writing
// outside the ranges the Kernels contract in gemm.h names.
#include "backend/cpu/gemm.h"

#if defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <algorithm>

namespace forge::cpu::gemm {
namespace {

constexpr int kMR = 6;
constexpr int kNR = 16;

// Lane mask with lanes [0, n) set, n clamped to [0, 8].
inline __m256i lanes(int64_t n) {
  alignas(32) static constexpr int kTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                 0,  0,  0,  0,  0,  0,  0,  0};
  const int64_t k = std::clamp<int64_t>(n, 0, 8);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTable + 8 - k));
}

inline __m256 load_n(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(n));
}
inline void store_n(float* p, int64_t n, __m256 v) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, lanes(n), v);
}

// In-place transpose of an 8 x 8 block held as 8 rows: afterwards r[c] is column c.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x20);
    r[4 + q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x31);
  }
}

// Loads a rows x kn block (row stride ld) as 8 zero-padded rows and transposes it.
inline void load_transposed(const float* src, int64_t ld, int64_t rows, int64_t kn, __m256 r[8]) {
  for (int i = 0; i < 8; ++i) r[i] = i < rows ? load_n(src + i * ld, kn) : _mm256_setzero_ps();
  transpose8(r);
}

void pack_a(const float* a, int64_t lda, bool trans_a, int64_t i0, int64_t k0, int64_t mc,
            int64_t kc, float* dst) {
  for (int64_t p = 0; p < mc; p += kMR) {
    const int64_t rows = std::min<int64_t>(kMR, mc - p);
    float* d = dst + p * kc;
    if (trans_a) {  // a is [K, M]: each k gives kMR contiguous values
      const float* src = a + k0 * lda + i0 + p;
      for (int64_t k = 0; k < kc; ++k) store_n(d + k * kMR, kMR, load_n(src + k * lda, rows));
    } else {  // a is [M, K]: transpose 8 x 8 blocks, keep the first kMR lanes
      const float* src = a + (i0 + p) * lda + k0;
      for (int64_t kk = 0; kk < kc; kk += 8) {
        const int64_t kn = std::min<int64_t>(8, kc - kk);
        __m256 r[8];
        load_transposed(src + kk, lda, rows, kn, r);
        for (int64_t k = 0; k < kn; ++k) store_n(d + (kk + k) * kMR, kMR, r[k]);
      }
    }
  }
}

void pack_b(const float* b, int64_t ldb, bool trans_b, int64_t k0, int64_t j0, int64_t nc,
            int64_t kc, float* dst) {
  for (int64_t q = 0; q < nc; q += kNR) {
    const int64_t cols = std::min<int64_t>(kNR, nc - q);
    float* d = dst + q * kc;
    if (!trans_b) {
      const float* src = b + k0 * ldb + j0 + q;
      for (int64_t k = 0; k < kc; ++k) {
        const float* s = src + k * ldb;
        _mm256_store_ps(d + k * kNR, load_n(s, cols));
        _mm256_store_ps(d + k * kNR + 8, cols > 8 ? load_n(s + 8, cols - 8) : _mm256_setzero_ps());
      }
    } else {
      for (int g = 0; g < 2; ++g) {
        const int64_t gcols = std::clamp<int64_t>(cols - 8 * g, 0, 8);
        const float* src = b + (j0 + q + 8 * g) * ldb + k0;
        for (int64_t kk = 0; kk < kc; kk += 8) {
          const int64_t kn = std::min<int64_t>(8, kc - kk);
          __m256 r[8];
          load_transposed(src + kk, ldb, gcols, kn, r);
          for (int64_t k = 0; k < kn; ++k) _mm256_store_ps(d + (kk + k) * kNR + 8 * g, r[k]);
        }
      }
    }
  }
}

template <int kRows>
void micro(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t cols,
           float alpha, const float* bias, bool accumulate) {
  __m256 acc[kRows][2];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(pb);
    const __m256 b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256 av = _mm256_broadcast_ss(pa + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
    pa += kMR;
    pb += kNR;
  }
  const int64_t n0 = std::min<int64_t>(cols, 8), n1 = cols - n0;
  const __m256 va = _mm256_set1_ps(alpha);
  __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
  if (bias) {
    bias0 = load_n(bias, n0);
    if (n1 > 0) bias1 = load_n(bias + 8, n1);
  }
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    float* cr = c + r * ldc;
    __m256 x0 = _mm256_fmadd_ps(acc[r][0], va, bias0);
    if (accumulate) x0 = _mm256_add_ps(x0, load_n(cr, n0));
    store_n(cr, n0, x0);
    if (n1 > 0) {
      __m256 x1 = _mm256_fmadd_ps(acc[r][1], va, bias1);
      if (accumulate) x1 = _mm256_add_ps(x1, load_n(cr + 8, n1));
      store_n(cr + 8, n1, x1);
    }
  }
}

constexpr MicroFn kMicro[kMR + 1] = {nullptr,  micro<1>, micro<2>, micro<3>,
                                     micro<4>, micro<5>, micro<6>};

void macro(int64_t mc, int64_t nc, int64_t kc, const float* pa, const float* pb, float* c,
           int64_t ldc, float alpha, const float* bias, bool accumulate) {
  macro_tiles<kMR, kNR>(kMicro, mc, nc, kc, pa, pb, c, ldc, alpha, bias, accumulate);
}

// ---- small m ---------------------------------------------------------------------------------

// Accumulator floats of rows_n (16 KiB, in L1): kM rows of kAccCols<kM> columns, each row
// a whole number of vectors so that every row stays aligned.
constexpr int64_t kAccFloats = 4096;
template <int kM>
constexpr int64_t kAccCols = kAccFloats / kM / 8 * 8;

// Folds kKU rows of b [K, N] (from row k) into the accumulators acc[r][0 : w].
template <int kM, int kKU>
inline void fold_rows(float (&acc)[kM][kAccCols<kM>], const float* a, int64_t lda, const float* bk,
                      int64_t ldb, int64_t k, int64_t w) {
  __m256 av[kM][kKU];
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < kKU; ++i) av[r][i] = _mm256_set1_ps(a[r * lda + k + i]);
  for (int64_t o = 0; o < w; o += 8) {
    const int64_t n = w - o;
    __m256 x[kKU];
#pragma GCC unroll 4
    for (int i = 0; i < kKU; ++i) {
      if (o % 16 == 0) __builtin_prefetch(bk + (2 * kKU + i) * ldb + o, 0, 2);  // see gemm.h
      x[i] = load_n(bk + i * ldb + o, n);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kM; ++r) {
      __m256 s = _mm256_load_ps(acc[r] + o);
#pragma GCC unroll 4
      for (int i = 0; i < kKU; ++i) s = _mm256_fmadd_ps(av[r][i], x[i], s);
      _mm256_store_ps(acc[r] + o, s);
    }
  }
}

// out[0:kM, jc:jc+w] for b [K, N]: B rows stream through and fold into L1 accumulators;
// kM x kKU broadcast registers stay at 8 or fewer (16 ymm registers in all).
template <int kM>
void rows_n_chunk(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t jc,
                  int64_t w, float* c, int64_t ldc, float alpha, const float* bias) {
  constexpr int kKU = kM <= 2 ? 4 : 2;
  alignas(32) float acc[kM][kAccCols<kM>];
  const int64_t padded = (w + 7) / 8 * 8;
  for (int r = 0; r < kM; ++r) std::fill(acc[r], acc[r] + padded, 0.0f);
  const float* bc = b + jc;
  int64_t k = 0;
  for (; k + kKU <= K; k += kKU) fold_rows<kM, kKU>(acc, a, lda, bc + k * ldb, ldb, k, w);
  for (; k < K; ++k) fold_rows<kM, 1>(acc, a, lda, bc + k * ldb, ldb, k, w);
  const __m256 va = _mm256_set1_ps(alpha);
  for (int r = 0; r < kM; ++r) {
    for (int64_t o = 0; o < w; o += 8) {
      const int64_t n = w - o;
      const __m256 bv = bias ? load_n(bias + jc + o, n) : _mm256_setzero_ps();
      store_n(c + r * ldc + jc + o, n, _mm256_fmadd_ps(_mm256_load_ps(acc[r] + o), va, bv));
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

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One 8-wide k step of dots(): kRB rows of b against kM rows of a (n valid lanes).
template <int kM, int kRB>
inline void dot_step(__m256 (&acc)[kM][kRB], const float* a, int64_t lda, const float* bj,
                     int64_t ldb, int64_t k, int64_t n) {
  __m256 bv[kRB];
#pragma GCC unroll 8
  for (int q = 0; q < kRB; ++q) bv[q] = load_n(bj + q * ldb + k, n);
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r) {
    const __m256 av = load_n(a + r * lda + k, n);
#pragma GCC unroll 8
    for (int q = 0; q < kRB; ++q) acc[r][q] = _mm256_fmadd_ps(av, bv[q], acc[r][q]);
  }
}

// kRB rows of b [N, K] against kM rows of a, one accumulator per dot product.
template <int kM, int kRB>
void dots(int64_t K, const float* a, int64_t lda, const float* bj, int64_t ldb, float* c,
          int64_t ldc, int64_t j, float alpha, const float* bias) {
  __m256 acc[kM][kRB];
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < kRB; ++q) acc[r][q] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    prefetch_next_rows<kRB>(bj, ldb, k);
    dot_step<kM, kRB>(acc, a, lda, bj, ldb, k, 8);
  }
  if (k < K) dot_step<kM, kRB>(acc, a, lda, bj, ldb, k, K - k);
#pragma GCC unroll 8
  for (int r = 0; r < kM; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < kRB; ++q)
      c[r * ldc + j + q] = alpha * hsum(acc[r][q]) + (bias ? bias[j + q] : 0.0f);
}

template <int kM, int kRB>
void rows_t_m(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t j0,
              int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  int64_t j = j0;
  for (; j + kRB <= j1; j += kRB)
    dots<kM, kRB>(K, a, lda, b + j * ldb, ldb, c, ldc, j, alpha, bias);
  for (; j < j1; ++j) dots<kM, 1>(K, a, lda, b + j * ldb, ldb, c, ldc, j, alpha, bias);
}

void rows_t(int m, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t j0,
            int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  switch (m) {
    case 1: return rows_t_m<1, 8>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    case 2: return rows_t_m<2, 4>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    case 3: return rows_t_m<3, 3>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
    default: return rows_t_m<4, 2>(K, a, lda, b, ldb, j0, j1, c, ldc, alpha, bias);
  }
}

}  // namespace

const Kernels* kernels_avx2() {
  static const Kernels k{"avx2", kMR,    kNR,   256,    6 * 24, 2048,
                         pack_a, pack_b, macro, rows_n, rows_t, {nullptr, nullptr}};
  return &k;
}

}  // namespace forge::cpu::gemm

#else  // this build does not compile AVX2

namespace forge::cpu::gemm {
const Kernels* kernels_avx2() { return nullptr; }
}  // namespace forge::cpu::gemm

#endif
