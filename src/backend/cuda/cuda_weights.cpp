// matmul and embedding with weights stored in f16, bf16, q8_0 and q4_0 on CUDA
// (kernels/weights.cu), with the CPU's answers (forge/ops.h, matmul):
//  - f16 / bf16: a few rows (decode) through forge_gemv_w16x (contiguous rows, K % 8 == 0:
//    16-byte weight reads) or forge_gemv_w16, which widen each weight as they read it; more rows
//    widen the weight to f32 in a scratch tensor once and multiply with cuBLASLt (the product is
//    the f32 one either way);
//  - q8_0 / q4_0: op(a)'s rows rounded to int8 blocks (forge_quantize_rows_q8), then the
//    integer block dot products (forge_matmul_q);
//  - embedding rows widened or dequantized to f32 (forge_embedding_w).
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

// Rows of out up to which the 16-bit weights are read directly (decode and small batches).
constexpr int64_t kGemvRows = 8;

int dtype_code(DType d) {
  switch (d) {
    case DType::F16: return 0;
    case DType::BF16: return 1;
    case DType::Q8_0: return 2;
    default: return 3;  // Q4_0 (only the four are registered)
  }
}

// Grid (ceil(N / 8), row groups of 4) of forge_gemv_w16 and forge_matmul_q; the kernels
// loop over row groups beyond the grid's y limit.
Dim3 column_grid(int64_t N, int64_t rows) {
  const int64_t groups = std::min<int64_t>((rows + 3) / 4, 65535);
  return Dim3{static_cast<unsigned>((N + 7) / 8), static_cast<unsigned>(groups)};
}

}  // namespace

bool gemv16_fits(int64_t rows, int64_t K, CUdeviceptr w, bool trans_a) {
  return rows <= kGemvMaxRows && !trans_a && K % 8 == 0 && (w & 15) == 0 &&
         rows * K * static_cast<int64_t>(sizeof(float)) <= kGemv16StageBytes;
}

void CudaBackend::gemv16(int64_t rows, int64_t K, int64_t N, bool gelu, bool bf16, const Gemv& g) {
  const auto blocks = static_cast<unsigned>((N + 7) / 8);  // a column per warp
  const auto smem = static_cast<size_t>(rows * K) * sizeof(float);
  // Launched early: its blocks prefetch their weight rows into L2 and wait while the kernel
  // before finishes (faster bf16 decode on an H100: docs/PERFORMANCE.md, session 27).
  kernels_->launch_early("forge_gemv_w16x", Dim3{blocks}, Dim3{256}, smem, g.x, g.w, g.bias, g.out,
                         rows, K, N, g.alpha, gelu ? 1 : 0, g.accumulate ? 1 : 0, g.res, g.gamma,
                         g.beta, g.eps, bf16 ? 1 : 0);
}

void CudaBackend::register_weight_kernels() {
  const Kernel mm = [](Backend& b, const OpCall& c) {
    static_cast<CudaBackend&>(b).weight_matmul(c);
  };
  const Kernel emb = [](Backend& b, const OpCall& c) {
    static_cast<CudaBackend&>(b).weight_embedding(c);
  };
  for (DType d : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    add_kernel(Op::matmul, dtype_key({DType::F32, d, DType::F32}), mm);
    add_kernel(Op::embedding, dtype_key({DType::U32, d}), emb);
  }
}

// a: [M, K] | [B, M, K] (trans_a: [K, M] | [B, K, M]) f32; w: [N, K] used transposed (its
// first N rows with b_rows); out: [M, N] | [B, M, N]. Validated by ops/matmul.cpp.
void CudaBackend::weight_matmul(const OpCall& c) {
  const Tensor &a = c.in(0), &w = c.in(1), &bias = c.in(2);
  Tensor& out = c.out(0);
  const MatmulSpec& spec = c.attrs.spec;
  const bool accumulate = c.attrs.accumulate;
  const int64_t N = out.dim(-1), M = out.dim(-2), rows = out.numel() / N, K = w.dim(1);
  const int64_t sb = a.rank() == 3 ? a.dim(-2) * a.dim(-1) : 0;
  const int64_t sm = spec.trans_a ? 1 : K, sk = spec.trans_a ? M : 1;
  const int flags = (bias.defined() ? 1 : 0) | (spec.gelu ? 2 : 0) | (accumulate ? 4 : 0);
  const CUdeviceptr bias_ptr = bias.defined() ? ptr(bias) : 0;
  const int code = dtype_code(w.dtype());
  if (K == 0) {
    empty_product(bias, spec.gelu, accumulate, out);
    return;
  }
  if (code <= 1) {
    if (gemv16_fits(rows, K, ptr(w), spec.trans_a)) {
      Gemv g;
      g.x = ptr(a);
      g.w = ptr(w);
      g.bias = bias_ptr;
      g.out = ptr(out);
      g.alpha = spec.alpha;
      g.accumulate = accumulate;
      gemv16(rows, K, N, spec.gelu, code == 1, g);
      return;
    }
    if (rows <= kGemvRows) {
      kernels_->launch("forge_gemv_w16", column_grid(N, rows), Dim3{256}, 0, ptr(a), ptr(w),
                       bias_ptr, ptr(out), rows, M, N, K, sb, sm, sk, spec.alpha, flags, code);
      return;
    }
    Tensor wide = Tensor::empty(w.shape(), DType::F32, Device("cuda", ordinal_));
    const int64_t n = w.numel();
    kernels_->launch("forge_widen16", grid_for(n), Dim3{256}, 0, ptr(w), ptr(wide), n, code);
    matmul(a, wide, bias, spec, accumulate, out);
    return;
  }
  const int64_t KB = K / 32;
  Scratch qa(*this, static_cast<size_t>(rows * K));
  Scratch da(*this, static_cast<size_t>(rows * KB) * sizeof(float));
  const int64_t warps = rows * KB;
  const int64_t blocks = std::min<int64_t>((warps + 7) / 8, 65536);
  kernels_->launch("forge_quantize_rows_q8", Dim3{static_cast<unsigned>(blocks)}, Dim3{256}, 0,
                   ptr(a), qa.get(), da.get(), rows, M, K, sb, sm, sk);
  const int64_t row_bytes = static_cast<int64_t>(dtype_bytes(w.dtype(), K));
  kernels_->launch("forge_matmul_q", column_grid(N, rows), Dim3{256}, 0, qa.get(), da.get(), ptr(w),
                   bias_ptr, ptr(out), rows, N, K, row_bytes, spec.alpha, flags, code);
}

// ids: [n] u32; table: [V, C] of a weight dtype; out: [n, C] f32.
void CudaBackend::weight_embedding(const OpCall& c) {
  const Tensor &ids = c.in(0), &table = c.in(1);
  Tensor& out = c.out(0);
  const int64_t n = ids.numel(), V = table.dim(0), C = table.dim(1);
  const int64_t row_bytes = static_cast<int64_t>(dtype_bytes(table.dtype(), C));
  if (n > 0x7fffffff)
    throw Error(ErrorKind::Unsupported, "embedding on cuda: " + std::to_string(n) + " ids");
  kernels_->launch("forge_embedding_w", Dim3{static_cast<unsigned>(n)}, Dim3{256}, 0, ptr(ids),
                   ptr(table), ptr(out), n, V, C, row_bytes, dtype_code(table.dtype()));
}

}  // namespace forge::cuda
