// The CPU GEMM engine behind CpuBackend::matmul (internal header).
//
// A Goto/BLIS-style GEMM: op(A) is packed into MR-row micro-panels and op(B) into NR-column
// micro-panels (both k-major, zero-padded at the edges), then a register-tiled micro-kernel
// computes each MR x NR tile of C with broadcast-FMA. Transposed operands are read in place
// while packing (no materialized transpose); alpha and the bias are applied when a tile is
// stored, and so are the optional GELU and accumulation (the epilogue: the driver applies
// them to each tile right after its last depth block, while it is in cache). Products with
// few rows (m <= kStreamM) skip packing and stream B at memory bandwidth.
//
// One kernel set exists per instruction set (gemm_portable.cpp, gemm_avx2.cpp,
// gemm_avx512.cpp); the driver (gemm_driver.cpp) does the blocking and the threading and is
// shared by all of them.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/cpu/simd.h"

namespace forge::cpu::gemm {

/// One (possibly batched) product, all f32, every matrix row-major:
///   C_b = alpha * op(A_b) @ op(B_b) + bias            for b in [0, batch)
/// then, with gelu, C_b = gelu(C_b) (the `gelu` op's tanh GELU), and with accumulate the
/// result is added to what C_b held on entry instead of replacing it.
///   op(A_b)[i, k] = trans_a ? a[b*stride_a + k*lda + i] : a[b*stride_a + i*lda + k]  [M, K]
///   op(B_b)[k, j] = trans_b ? b[b*stride_b + j*ldb + k] : b[b*stride_b + k*ldb + j]  [K, N]
///   C_b[i, j] = c[b*stride_c + i*ldc + j]                                            [M, N]
/// A stride of 0 shares that operand across the batch. bias is [N] or nullptr. K = 0 gives
/// [acc +] [gelu](bias or zeros). The caller guarantees valid, non-overlapping, in-bounds pointers.
/// The element type of B: f32, or 16-bit weights widened to f32 as they are loaded.
enum class BType : uint8_t { f32, f16, bf16 };

struct Problem {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  const float* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  bool trans_a = false;
  const float* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool trans_b = false;
  float* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  float alpha = 1.0f;
  const float* bias = nullptr;
  bool gelu = false;        // epilogue: gelu after alpha and the bias
  bool accumulate = false;  // C += the result (C is read): the residual stream's x += y @ W
  /// f16/bf16 B: b16 holds it (b is unused); only trans_b with stride_b = 0 (weights stored
  /// [N, K], as forge keeps every non-f32 weight). Each value is widened to f32 exactly, and
  /// the product is then the f32 one.
  BType b_type = BType::f32;
  const uint16_t* b16 = nullptr;
};

/// Rows of op(A) up to which the unpacked streaming (GEMV-like) path is used. Measured on
/// Zen 5: faster than packing up to 4 rows; at 8 rows packing wins for b [K, N] (the
/// accumulator traffic of the streaming kernel grows with m) and ties for b [N, K].
inline constexpr int kSmallM = 4;
/// Rows of op(A) up to which the driver takes the streaming path, in groups of at most
/// kSmallM rows. Each row's sums then run in the same order whatever the row count, so a
/// decode step of up to 8 sequences gives each one the bits it gets alone (forge serve's
/// continuous batching promises that on the CPU). For b [N, K] (every decode weight) this
/// costs nothing: at 8 rows streaming ties with packing.
inline constexpr int kStreamM = 2 * kSmallM;

/// The kernels of one instruction set. All pointers are valid for the ranges described.
struct Kernels {
  const char* name;
  int mr, nr;      // register tile of the micro-kernel (C tile of mr x nr)
  int kc, mc, nc;  // cache blocking: depth of a packed block, rows of an A block, columns of
                   // a B panel; mc is a multiple of mr and nc of nr

  /// Packs op(A)[i0 : i0+mc, k0 : k0+kc] into ceil(mc/mr) micro-panels of kc*mr floats each,
  /// panel p holding rows i0+p*mr.. as dst[p*kc*mr + k*mr + r] (rows past mc zero-filled).
  void (*pack_a)(const float* a, int64_t lda, bool trans_a, int64_t i0, int64_t k0, int64_t mc,
                 int64_t kc, float* dst);
  /// Packs op(B)[k0 : k0+kc, j0 : j0+nc] into ceil(nc/nr) micro-panels of kc*nr floats,
  /// panel q holding columns j0+q*nr.. as dst[q*kc*nr + k*nr + c] (columns past nc zero).
  void (*pack_b)(const float* b, int64_t ldb, bool trans_b, int64_t k0, int64_t j0, int64_t nc,
                 int64_t kc, float* dst);
  /// C[0:mc, 0:nc] (row stride ldc) = alpha * PA @ PB (+ bias[0:nc] if bias) (+ C if
  /// accumulate), PA/PB as packed above with depth kc.
  void (*macro)(int64_t mc, int64_t nc, int64_t kc, const float* pa, const float* pb, float* c,
                int64_t ldc, float alpha, const float* bias, bool accumulate);
  /// Small-m streaming product for columns [j0, j1) of C, m in [1, kSmallM], a contiguous
  /// rows [m, K] (row stride lda), K >= 1:
  ///   c[r*ldc + j] = alpha * sum_k a[r*lda + k] * B(k, j) + (bias ? bias[j] : 0)
  /// with B(k, j) = b[k*ldb + j] (rows_n, b [K, N]) or b[j*ldb + k] (rows_t, b [N, K]).
  void (*rows_n)(int m, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
                 int64_t j0, int64_t j1, float* c, int64_t ldc, float alpha, const float* bias);
  void (*rows_t)(int m, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
                 int64_t j0, int64_t j1, float* c, int64_t ldc, float alpha, const float* bias);
  /// rows_t with f16 / bf16 b [N, K], widened in registers (nullptr: the driver widens a few
  /// rows at a time into a buffer and runs rows_t on it). Index 0 f16, 1 bf16.
  void (*rows_t16[2])(int m, int64_t K, const float* a, int64_t lda, const uint16_t* b, int64_t ldb,
                      int64_t j0, int64_t j1, float* c, int64_t ldc, float alpha,
                      const float* bias);
};

/// A micro-kernel of one instruction set: the C tile of `rows` (its template argument, 1..MR)
/// x cols (<= NR) as Kernels::macro describes it, from packed panels of depth kc.
using MicroFn = void (*)(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc,
                         int64_t cols, float alpha, const float* bias, bool accumulate);

/// Kernels::macro for an MR x NR kernel set, shared by every instruction set: B's micro-panel
/// outer, so that it stays in L1 while A's micro-panels stream from L2; micro[rows] computes
/// each tile (rows = 1..MR; micro[0] unused).
template <int MR, int NR>
inline void macro_tiles(const MicroFn (&micro)[MR + 1], int64_t mc, int64_t nc, int64_t kc,
                        const float* pa, const float* pb, float* c, int64_t ldc, float alpha,
                        const float* bias, bool accumulate) {
  for (int64_t j = 0; j < nc; j += NR) {
    const int64_t cols = nc - j < NR ? nc - j : NR;
    for (int64_t i = 0; i < mc; i += MR) {
      const int rows = static_cast<int>(mc - i < MR ? mc - i : MR);
      micro[rows](kc, pa + i * kc, pb + j * kc, c + i * ldc + j, ldc, cols, alpha,
                  bias ? bias + j : nullptr, accumulate);
    }
  }
}

/// The streaming kernels ask for the rows of b they read next themselves: a row is only a few
/// KiB (GPT-2: 1.5-12 KiB), too short a stream for the hardware prefetchers to reach DRAM's
/// bandwidth (docs/PERFORMANCE.md, "Measurements that shaped the kernels"). rows_t walks kRB
/// rows of b [N, K] together along k: at each cache line of k, the line at k of each of the
/// kRB rows 2 x kRB rows ahead goes into L2 (prefetcht1). rows_n folds kKU rows of b [K, N]
/// at a time and prefetches the rows 2 x kKU ahead the same way.
template <int kRB, class T>
inline void prefetch_next_rows(const T* rows, int64_t ldb, int64_t k) {
  constexpr int64_t kLine = 64 / sizeof(T);  // values per cache line
  if (k % kLine != 0) return;
  const T* next = rows + 2 * kRB * ldb + k;
#pragma GCC unroll 8
  for (int q = 0; q < kRB; ++q) __builtin_prefetch(next + q * ldb, 0, 2);
}

/// dst[0:n] = src[0:n] widened to f32 (t: f16 or bf16), exactly; vectorized where the CPU
/// can (F16C).
void widen(BType t, const uint16_t* src, int64_t n, float* dst);

const Kernels& kernels_portable();
/// nullptr when the build (e.g. wasm) does not compile that instruction set.
const Kernels* kernels_avx2();
const Kernels* kernels_avx512();

/// The kernel set `run` uses: the one of simd_level(), or the level a test forced.
const Kernels& active_kernels();

/// Test hook: makes `run` use `level` (nullopt: back to simd_level()). Returns false, and
/// changes nothing, when this CPU or build cannot run that level. Not thread-safe with
/// running products.
bool force_level(std::optional<SimdLevel> level);

/// Computes the product on the process-wide thread pool (the calling thread works too).
void run(const Problem& p);

}  // namespace forge::cpu::gemm
