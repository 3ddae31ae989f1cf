// Portable GEMM kernels: plain C++ that compilers auto-vectorize for whatever target they
// build (SSE2, NEON, wasm SIMD128). The fallback when no x86 SIMD level is usable, and the
// reference the SIMD kernels are tested against alongside the float64 reference.
#include <algorithm>
#include <cstring>

#include "backend/cpu/gemm.h"

namespace forge::cpu::gemm {
namespace {

// 4 x 8 tile: 32 accumulators = 8 registers of a 128-bit SIMD target (SSE2, NEON, wasm
// SIMD128), leaving room for the B row and the broadcast.
constexpr int kMR = 4;
constexpr int kNR = 8;

void pack_a(const float* a, int64_t lda, bool trans_a, int64_t i0, int64_t k0, int64_t mc,
            int64_t kc, float* dst) {
  for (int64_t p = 0; p < mc; p += kMR) {
    const int64_t rows = std::min<int64_t>(kMR, mc - p);
    float* d = dst + p * kc;
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t r = 0; r < kMR; ++r) {
        float v = 0.0f;
        if (r < rows) {
          const int64_t i = i0 + p + r;
          v = trans_a ? a[(k0 + k) * lda + i] : a[i * lda + k0 + k];
        }
        d[k * kMR + r] = v;
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
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = b + (k0 + k) * ldb + j0 + q;
        for (int64_t c = 0; c < kNR; ++c) d[k * kNR + c] = c < cols ? src[c] : 0.0f;
      }
    } else {
      // b is [N, K]: walk each stored row once (contiguous reads), scatter into the panel.
      std::fill(d, d + kc * kNR, 0.0f);
      for (int64_t c = 0; c < cols; ++c) {
        const float* src = b + (j0 + q + c) * ldb + k0;
        for (int64_t k = 0; k < kc; ++k) d[k * kNR + c] = src[k];
      }
    }
  }
}

// C tile [rows, cols] = alpha * PA @ PB (+ bias) (+ C). Written so that compilers keep acc
// in vector registers: fully unrolled fixed-size loops, j innermost over a contiguous B row.
template <int kRows>
void micro(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t cols,
           float alpha, const float* bias, bool accumulate) {
  float acc[kRows][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = pb + k * kNR;
    const float* ak = pa + k * kMR;
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const float ar = ak[r];
#pragma GCC unroll 8
      for (int j = 0; j < kNR; ++j) acc[r][j] += ar * bk[j];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float* cr = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) {
      float v = alpha * acc[r][j];
      if (bias) v += bias[j];
      if (accumulate) v += cr[j];
      cr[j] = v;
    }
  }
}

constexpr MicroFn kMicro[kMR + 1] = {nullptr, micro<1>, micro<2>, micro<3>, micro<4>};

void macro(int64_t mc, int64_t nc, int64_t kc, const float* pa, const float* pb, float* c,
           int64_t ldc, float alpha, const float* bias, bool accumulate) {
  macro_tiles<kMR, kNR>(kMicro, mc, nc, kc, pa, pb, c, ldc, alpha, bias, accumulate);
}

// Columns per accumulator chunk of rows_n: m rows of it stay in L1 while B rows stream by.
constexpr int64_t kChunk = 1024;

void rows_n(int m, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t j0,
            int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  float acc[kSmallM][kChunk];
  for (int64_t jc = j0; jc < j1; jc += kChunk) {
    const int64_t w = std::min(kChunk, j1 - jc);
    for (int r = 0; r < m; ++r) std::fill(acc[r], acc[r] + w, 0.0f);
    int64_t k = 0;
    if (m == 1) {
      // One row (decode): four B rows per pass over the accumulators, a quarter of the
      // accumulator loads and stores.
      float* ac = acc[0];
      for (; k + 4 <= K; k += 4) {
        const float a0 = a[k], a1 = a[k + 1], a2 = a[k + 2], a3 = a[k + 3];
        const float* b0 = b + k * ldb + jc;
        const float* b1 = b0 + ldb;
        const float* b2 = b1 + ldb;
        const float* b3 = b2 + ldb;
        for (int64_t j = 0; j < w; ++j) ac[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
      }
    }
    for (; k < K; ++k) {
      const float* bk = b + k * ldb + jc;
      for (int r = 0; r < m; ++r) {
        const float ar = a[r * lda + k];
        float* ac = acc[r];
        for (int64_t j = 0; j < w; ++j) ac[j] += ar * bk[j];
      }
    }
    for (int r = 0; r < m; ++r)
      for (int64_t j = 0; j < w; ++j)
        c[r * ldc + jc + j] = alpha * acc[r][j] + (bias ? bias[jc + j] : 0.0f);
  }
}

void rows_t(int m, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t j0,
            int64_t j1, float* c, int64_t ldc, float alpha, const float* bias) {
  constexpr int kLanes = 8;  // independent partial sums: vectorizable, no serial chain
  for (int64_t j = j0; j < j1; ++j) {
    const float* bj = b + j * ldb;
    for (int r = 0; r < m; ++r) {
      const float* ar = a + r * lda;
      float part[kLanes] = {};
      int64_t k = 0;
      for (; k + kLanes <= K; k += kLanes)
        for (int l = 0; l < kLanes; ++l) part[l] += ar[k + l] * bj[k + l];
      float s = 0.0f;
      for (; k < K; ++k) s += ar[k] * bj[k];
      for (int l = 0; l < kLanes; ++l) s += part[l];
      c[r * ldc + j] = alpha * s + (bias ? bias[j] : 0.0f);
    }
  }
}

}  // namespace

const Kernels& kernels_portable() {
  static const Kernels k{"portable", kMR,    kNR,   256,    128,    2048,
                         pack_a,     pack_b, macro, rows_n, rows_t, {nullptr, nullptr}};
  return k;
}

}  // namespace forge::cpu::gemm
