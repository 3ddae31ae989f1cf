// Products with block-quantized weights on the CPU (internal header): out = a @ W^T with a
// f32 [M, K] and W Q8_0 or Q4_0 [N, K] (ggml's blocks of 32 along K, forge/dtype.h).
//
// As llama.cpp does, the activations are rounded to int8 blocks too and every block product
// is an integer dot product (AVX-512 VNNI where the CPU has it), never a widening of the
// weights to f32. The rounding, which forge/ops.h documents and tests/reference.cpp repeats
// in float64, for each block x[0:32] of a row of a:
//   amax = max |x_i|;  d = amax / 127 (f32);  id = d > 0 ? 1 / d : 0 (f32)
//   q_i = clamp(round_half_even(x_i * id), -127, 127)
// and for row r of a and row j of W, over the K / 32 blocks b (dw: the weight block's f16
// scale, w_i its values: int8, or nibble - 8):
//   out[r, j] = sum_b (dw_b * d_b) * (sum_i q_i * w_i)     (the float sum in f32)
// then alpha, the bias, gelu and accumulation as for f32 weights. A row's result does not
// depend on the thread count, nor, within each path, on how many rows or columns are computed
// together; the decode kernels (M < 16) and the prefill tiles sum the blocks' f32 terms in
// different orders, so the two paths may differ in the last bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "forge/dtype.h"

namespace forge::cpu::quant {

inline constexpr int64_t kBlock = 32;

/// Activation rows rounded to blocks (layout above): row r's values q[r * K ..], its block
/// scales d[r * kb ..] and the sums of each block's 32 values s[r * kb ..].
struct Rows {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* s = nullptr;
  int64_t K = 0, kb = 0;  // kb = K / 32
};

/// Weight dtypes the kernels take, as an index into Kernels::dots.
enum WeightType { kQ8_0 = 0, kQ4_0 = 1 };

struct Kernels {
  const char* name;
  /// Rounds x[0:K] (K a multiple of 32) to q[0:K], d[0:K/32], s[0:K/32].
  void (*quantize)(const float* x, int64_t K, int8_t* q, float* d, int32_t* s);
  /// c[r * ldc + j] = sum_b (dw * d) * dot for rows r < m (1..kMaxRows) of a and weight rows
  /// j in [j0, j1), each weight row `row_bytes` bytes from w (row j at w + j * row_bytes).
  void (*dots[2])(int m, const Rows& a, const std::byte* w, size_t row_bytes, int64_t j0,
                  int64_t j1, float* c, int64_t ldc);
};
inline constexpr int kMaxRows = 4;

const Kernels& kernels_portable();
/// nullptr when the build or the CPU lacks AVX-512 VNNI (or FORGE_SIMD caps it below avx512).
const Kernels* kernels_vnni();
/// nullptr when the build or the CPU lacks AVX2 (or FORGE_SIMD caps it below avx2).
const Kernels* kernels_avx2();
/// The kernels run() uses: VNNI when available, else AVX2, else portable.
const Kernels& active_kernels();

/// One product: c[i, j] (row stride ldc) = alpha * sum_k op(a)[i, k] W[j, k] (+ bias[j]),
/// then gelu, then added to c with accumulate. op(a) = a [M, K] (row stride lda), or with
/// trans_a a [K, M] used transposed. W: N rows of K / 32 blocks of `type`.
struct Problem {
  int64_t M = 0, N = 0, K = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const std::byte* w = nullptr;
  DType type = DType::Q8_0;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f;
  const float* bias = nullptr;
  bool gelu = false, accumulate = false;
};

/// Runs the product on the CPU thread pool.
void run(const Problem& p);

/// Many rows (prefill) with AVX-512 VNNI: the product of p's activations already rounded
/// (q [M, K], d [M, K / 32]) by tiles of 32 rows x 6 weight columns (quant_tile_vnni.cpp).
/// False, with nothing done, where VNNI is not available.
bool run_tiles(const Problem& p, const int8_t* q, const float* d);
/// c[r * p.ldc + j + i] = [c +] gelu?(p.alpha * raw[r * ld + i] + p.bias[j + i]) for r < m,
/// i < n (n <= 64): the epilogue of a finished tile.
void finish(const Problem& p, int m, int64_t j, int64_t n, const float* raw, int64_t ld, float* c);

/// dst[0:n] = the values of n consecutive elements (whole blocks) of a Q8_0 / Q4_0 row: d * q.
void dequantize(DType type, const std::byte* src, int64_t n, float* dst);

}  // namespace forge::cpu::quant
