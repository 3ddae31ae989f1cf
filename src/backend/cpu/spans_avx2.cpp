// The span_loops.h kernels compiled for AVX2 + FMA (this file gets -mavx2 -mfma): the same
// C++ as the baseline build, auto-vectorized 8 lanes wide. Results may differ from the
// baseline build by an ulp or so where the compiler contracts a * b + c into an FMA; the
// summation order is the same (the loops fix it with 16 lanes). Dropout is exact.
#include "backend/cpu/span_loops.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {

void gelu_avx2(const float* x, float* y, int64_t n) { gelu_loop(x, y, n); }

void gelu_bwd_avx2(const float* x, const float* dy, float* dx, int64_t n) {
  gelu_bwd_loop(x, dy, dx, n);
}

void softmax_row_avx2(const float* x, float* y, int64_t n, float scale) {
  softmax_row_loop(x, y, n, scale);
}

void layernorm_row_avx2(const float* x, const float* gamma, const float* beta, float eps, float* y,
                        int64_t C) {
  layernorm_row_loop(x, gamma, beta, eps, y, C);
}

float logsumexp_avx2(const float* x, int64_t n) { return logsumexp_loop(x, n); }

void layernorm_bwd_row_avx2(const float* x, const float* gamma, const float* dy, float eps,
                            float* dx, int64_t C, float* dgamma_acc, float* dbeta_acc) {
  layernorm_bwd_row_loop(x, gamma, dy, eps, dx, C, dgamma_acc, dbeta_acc);
}

void dropout_avx2(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                  uint32_t threshold, float scale) {
  dropout_loop(x, y, n, index0, seed, threshold, scale);
}

}  // namespace forge::cpu
