// Span kernels: the inner loops of the CPU element and row ops, each over one contiguous
// span (a row, or a slice of a flat tensor). Every kernel has a portable C++ version
// (span_loops.h) that is compiled twice, for the baseline ISA (inside the family files
// elementwise.cpp, rows.cpp, gather.cpp) and for AVX2 + FMA (spans_avx2.cpp); where the
// math is transcendental- or hash-heavy there is also a hand-written AVX-512 version
// (elementwise_avx512.cpp, rows_avx512.cpp). pick() chooses one at run time.
//
// This header is included by the ISA-specific files too, so its inline functions must stay
// unused there (a copy compiled with AVX2/AVX-512 flags could be the one the linker keeps).
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"
#include "forge/adamw_step.h"

namespace forge::cpu {

/// True when the AVX-512 span kernels may run (CPU support, FORGE_SIMD not capping it).
inline bool use_avx512() { return simd_level() == SimdLevel::Avx512; }

/// The span kernel for this CPU: the AVX-512 one, else the AVX2 one, else the baseline one.
template <typename F>
F pick(F avx512, F avx2, F baseline) {
  switch (simd_level()) {
    case SimdLevel::Avx512: return avx512;
    case SimdLevel::Avx2: return avx2;
    case SimdLevel::Portable: break;
  }
  return baseline;
}

/// Elements of memory-bound work one thread should get before a second thread is worth
/// waking (~64 KiB of floats): decode-sized rows (768 wide) stay on the calling thread.
inline constexpr int64_t kGrainElems = 16384;
/// The same for exp/tanh-heavy loops, where each element costs ~20 flops.
inline constexpr int64_t kGrainTranscendental = 4096;

/// Rows per task for a row op whose rows hold `cols` elements.
inline int64_t row_grain(int64_t cols, int64_t grain_elems) {
  return cols >= grain_elems ? 1 : grain_elems / (cols > 0 ? cols : 1);
}

/// y[0, n) = scale * softmax(x[0, n)), n >= 1, with the span kernel pick() chooses.
/// Defined in rows.cpp; ce_bwd (gather.cpp) shares it.
void softmax_row(const float* x, float* y, int64_t n, float scale);

/// y[0, n) = gelu(x[0, n)), y may alias x, with the span kernel pick() chooses. The `gelu`
/// op and the GEMM's gelu epilogue both use it, so fused and unfused products agree.
/// Defined in elementwise.cpp.
void gelu_span(const float* x, float* y, int64_t n);

/// The per-call constants of one AdamW update (forge/backend.h).
using AdamWCoeffs = AdamWStep;

// --- AVX2 builds of the span_loops.h kernels (spans_avx2.cpp); same contracts as below ---

void gelu_avx2(const float* x, float* y, int64_t n);
void gelu_bwd_avx2(const float* x, const float* dy, float* dx, int64_t n);
void softmax_row_avx2(const float* x, float* y, int64_t n, float scale);
void layernorm_row_avx2(const float* x, const float* gamma, const float* beta, float eps, float* y,
                        int64_t C);
float logsumexp_avx2(const float* x, int64_t n);
/// LayerNorm backward of one row (see span_loops.h); no AVX-512 version.
void layernorm_bwd_row_avx2(const float* x, const float* gamma, const float* dy, float eps,
                            float* dx, int64_t C, float* dgamma_acc, float* dbeta_acc);
void dropout_avx2(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                  uint32_t threshold, float scale);

// --- AVX-512 span kernels (defined in *_avx512.cpp; call only when use_avx512()) ---

/// y[i] = gelu(x[i]) (tanh approximation), i < n. y may alias x.
void gelu_avx512(const float* x, float* y, int64_t n);
/// dx[i] = dy[i] * gelu'(x[i]), i < n.
void gelu_bwd_avx512(const float* x, const float* dy, float* dx, int64_t n);
/// y[0, n) = scale * softmax(x[0, n)); n >= 1.
void softmax_row_avx512(const float* x, float* y, int64_t n, float scale);
/// One LayerNorm row of C >= 1 elements.
void layernorm_row_avx512(const float* x, const float* gamma, const float* beta, float eps,
                          float* y, int64_t C);
/// One AdamW update of param/m/v[0, n) with gradient g (the portable loop does not
/// vectorize: std::sqrt may set errno).
void adamw_avx512(float* param, const float* g, float* m, float* v, int64_t n,
                  const AdamWCoeffs& k);
/// y[i] = x[i] * scale if (dropout_hash(seed, index0 + i) >> 8) >= threshold, else 0.
void dropout_avx512(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                    uint32_t threshold, float scale);
/// log(sum(exp(x[0, n)))), max-subtracted, summed in double; n >= 1.
float logsumexp_avx512(const float* x, int64_t n);

}  // namespace forge::cpu
