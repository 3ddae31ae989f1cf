// Targets without x86 (wasm): the x86 kernel files (*_avx2 / *_avx512 / *_vnni.cpp) are not
// compiled, and simd_level() is always Portable there, so the dispatchers never pick their
// kernels. Their entry points still exist, for the dispatch tables: the kernel sets say "not
// built" (nullptr, as their headers allow), and each span kernel is the portable loop.
#include "backend/cpu/attention_tile.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/span_loops.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {

namespace gemm {
const Kernels* kernels_avx2() { return nullptr; }
const Kernels* kernels_avx512() { return nullptr; }
}  // namespace gemm

namespace quant {
const Kernels* kernels_vnni() { return nullptr; }
const Kernels* kernels_avx2() { return nullptr; }
bool run_tiles(const Problem&, const int8_t*, const float*) { return false; }
}  // namespace quant

void attention_tile_avx2(const AttnTile& t, float* scratch) { attention_tile_baseline(t, scratch); }
void attention_tile_avx512(const AttnTile& t, float* scratch) {
  attention_tile_baseline(t, scratch);
}

void gelu_avx2(const float* x, float* y, int64_t n) { gelu_loop(x, y, n); }
void gelu_avx512(const float* x, float* y, int64_t n) { gelu_loop(x, y, n); }
void gelu_bwd_avx2(const float* x, const float* dy, float* dx, int64_t n) {
  gelu_bwd_loop(x, dy, dx, n);
}
void gelu_bwd_avx512(const float* x, const float* dy, float* dx, int64_t n) {
  gelu_bwd_loop(x, dy, dx, n);
}
void softmax_row_avx2(const float* x, float* y, int64_t n, float scale) {
  softmax_row_loop(x, y, n, scale);
}
void softmax_row_avx512(const float* x, float* y, int64_t n, float scale) {
  softmax_row_loop(x, y, n, scale);
}
void layernorm_row_avx2(const float* x, const float* gamma, const float* beta, float eps, float* y,
                        int64_t C) {
  layernorm_row_loop(x, gamma, beta, eps, y, C);
}
void layernorm_row_avx512(const float* x, const float* gamma, const float* beta, float eps,
                          float* y, int64_t C) {
  layernorm_row_loop(x, gamma, beta, eps, y, C);
}
void layernorm_bwd_row_avx2(const float* x, const float* gamma, const float* dy, float eps,
                            float* dx, int64_t C, float* dgamma_acc, float* dbeta_acc) {
  layernorm_bwd_row_loop(x, gamma, dy, eps, dx, C, dgamma_acc, dbeta_acc);
}
float logsumexp_avx2(const float* x, int64_t n) { return logsumexp_loop(x, n); }
float logsumexp_avx512(const float* x, int64_t n) { return logsumexp_loop(x, n); }
void adamw_avx512(float* param, const float* g, float* m, float* v, int64_t n,
                  const AdamWCoeffs& k) {
  adamw_loop(param, g, m, v, n, k);
}
void dropout_avx2(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                  uint32_t threshold, float scale) {
  dropout_loop(x, y, n, index0, seed, threshold, scale);
}
void dropout_avx512(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                    uint32_t threshold, float scale) {
  dropout_loop(x, y, n, index0, seed, threshold, scale);
}

}  // namespace forge::cpu
