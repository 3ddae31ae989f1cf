// The kernels other than matmul and attention on CUDA: each op's sizes, grid and arguments for its
// kernel in kernels/*.cu (the ABI each file's comments state), and the scratch memory of the
// two-stage reductions. Inputs were validated by the ops layer (src/ops/).
#include <algorithm>
#include <climits>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

constexpr Dim3 kBlock{256};

// One block per row (grid.x = rows).
Dim3 grid_rows(int64_t rows, const char* op) {
  if (rows > INT_MAX)
    throw Error(ErrorKind::Unsupported,
                std::string(op) + " on cuda: " + std::to_string(rows) + " rows (at most 2^31 - 1)");
  return Dim3{static_cast<unsigned>(rows)};
}

// The column reductions' fixed chunks of rows: 32 rows each as the CPU's (so that dgamma
// and dbeta are summed in the same order), more when that would exceed the grid's y limit.
struct RowChunks {
  int64_t rows_per_chunk, chunks;
};
RowChunks row_chunks(int64_t rows) {
  int64_t per = 32;
  if ((rows + per - 1) / per > 65535) per = (rows + 65534) / 65535;
  return {per, std::max<int64_t>(1, (rows + per - 1) / per)};
}

Dim3 grid_columns(int64_t C, int64_t chunks = 1) {
  return Dim3{static_cast<unsigned>((C + 255) / 256), static_cast<unsigned>(chunks)};
}

int64_t rows_of(const Tensor& x) { return x.numel() / x.dim(-1); }

}  // namespace

// ---- elementwise ------------------------------------------------------------------------

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.numel();
  kernels_->launch("forge_add", grid_for(n), kBlock, 0, ptr(a), ptr(b), ptr(out), n, b.numel());
}

void CudaBackend::gelu(const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  kernels_->launch("forge_gelu", grid_for(n), kBlock, 0, ptr(x), ptr(out), n);
}

void CudaBackend::gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.numel();
  kernels_->launch("forge_gelu_bwd", grid_for(n), kBlock, 0, ptr(x), ptr(dy), ptr(dx), n);
}

void CudaBackend::scale(const Tensor& x, float s, Tensor& out) {
  const int64_t n = x.numel();
  kernels_->launch("forge_scale", grid_for(n), kBlock, 0, ptr(x), ptr(out), s, n);
}

void CudaBackend::dropout(const Tensor& x, uint64_t seed, uint64_t index0, uint32_t threshold,
                          float scale, Tensor& out) {
  const int64_t n = x.numel();
  kernels_->launch("forge_dropout", grid_for(n), kBlock, 0, ptr(x), ptr(out), n, seed, index0,
                   threshold, scale);
}

void CudaBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                        const AdamWStep& k) {
  const int64_t n = param.numel();
  kernels_->launch("forge_adamw", grid_for(n), kBlock, 0, ptr(param), ptr(grad), ptr(m), ptr(v), n,
                   k.decay, k.beta1, k.one_minus_beta1, k.beta2, k.one_minus_beta2, k.step_size,
                   k.bc2_sqrt, k.eps);
}

// ---- rows -------------------------------------------------------------------------------

void CudaBackend::softmax(const Tensor& x, bool causal, int64_t offset, Tensor& out) {
  const int64_t cols = x.dim(-1), rows = rows_of(x);
  const int64_t T = causal ? x.dim(-2) : 1;
  const int c = causal ? 1 : 0;
  kernels_->launch("forge_softmax", grid_rows(rows, "softmax"), kBlock, 0, ptr(x), ptr(out), rows,
                   cols, T, c, offset);
}

void CudaBackend::softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t cols = y.dim(-1), rows = rows_of(y);
  kernels_->launch("forge_softmax_bwd", grid_rows(rows, "softmax_bwd"), kBlock, 0, ptr(y), ptr(dy),
                   ptr(dx), rows, cols);
}

void CudaBackend::argmax_rows(const Tensor& x, Tensor& out) {
  const int64_t cols = x.dim(-1), rows = out.numel();
  kernels_->launch("forge_argmax_rows", grid_rows(rows, "argmax_rows"), kBlock, 0, ptr(x), ptr(out),
                   rows, cols);
}

void CudaBackend::layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                            Tensor& out) {
  const int64_t C = x.dim(-1), rows = rows_of(x);
  kernels_->launch("forge_layernorm", grid_rows(rows, "layernorm"), kBlock, 0, ptr(x), ptr(gamma),
                   ptr(beta), ptr(out), rows, C, eps);
}

void CudaBackend::layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps,
                                Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  // dx row by row (saving each row's mean and rstd), then dgamma and dbeta as column sums:
  // partial sums per chunk of rows, then the chunks added in order.
  const int64_t C = x.dim(-1), rows = rows_of(x);
  Scratch stats(*this, static_cast<size_t>(2 * rows) * sizeof(float));
  kernels_->launch("forge_layernorm_bwd_dx", grid_rows(rows, "layernorm_bwd"), kBlock, 0, ptr(x),
                   ptr(gamma), ptr(dy), ptr(dx), stats.get(), rows, C, eps);
  const RowChunks rc = row_chunks(rows);
  const size_t partial_bytes = static_cast<size_t>(rc.chunks * C) * sizeof(float);
  Scratch pg(*this, partial_bytes), pb(*this, partial_bytes);
  kernels_->launch("forge_layernorm_bwd_params_partial", grid_columns(C, rc.chunks), kBlock, 0,
                   ptr(x), ptr(dy), stats.get(), pg.get(), pb.get(), rows, C, rc.rows_per_chunk);
  kernels_->launch("forge_sum_chunks", grid_columns(C), kBlock, 0, pg.get(), ptr(dgamma), rc.chunks,
                   C);
  kernels_->launch("forge_sum_chunks", grid_columns(C), kBlock, 0, pb.get(), ptr(dbeta), rc.chunks,
                   C);
}

// ---- reductions -------------------------------------------------------------------------

void CudaBackend::sum_rows(const Tensor& x, Tensor& out) {
  const int64_t C = x.dim(-1), rows = rows_of(x);
  const RowChunks rc = row_chunks(rows);
  Scratch partial(*this, static_cast<size_t>(rc.chunks * C) * sizeof(float));
  kernels_->launch("forge_sum_rows_partial", grid_columns(C, rc.chunks), kBlock, 0, ptr(x),
                   partial.get(), rows, C, rc.rows_per_chunk);
  kernels_->launch("forge_sum_chunks", grid_columns(C), kBlock, 0, partial.get(), ptr(out),
                   rc.chunks, C);
}

void CudaBackend::sumsq(const Tensor& x, Tensor& out) {
  // Chunks of 2^16 elements summed in double, then the partials in order, as the CPU.
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t n = x.numel();
  const int64_t count = (n + kChunk - 1) / kChunk;
  Scratch partial(*this, static_cast<size_t>(count) * sizeof(double));
  kernels_->launch("forge_sumsq_partial", grid_rows(count, "sumsq"), kBlock, 0, ptr(x),
                   partial.get(), n, kChunk);
  kernels_->launch("forge_sumsq_final", Dim3{1}, kBlock, 0, partial.get(), ptr(out), count);
}

// ---- indices: embedding and cross-entropy ------------------------------------------------

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const int64_t n = ids.numel(), V = table.dim(0), C = table.dim(1);
  kernels_->launch("forge_embedding", grid_rows(n, "embedding"), kBlock, 0, ptr(ids), ptr(table),
                   ptr(out), n, V, C);
}

void CudaBackend::scatter_add_rows(const Tensor& ids, const Tensor& src, Tensor& out) {
  const int64_t n = ids.numel(), num_rows = out.dim(0), C = out.dim(-1);
  const Dim3 grid{static_cast<unsigned>(grid_rows(n, "scatter_add_rows").x),
                  static_cast<unsigned>((C + 255) / 256)};
  kernels_->launch("forge_scatter_add_rows", grid, kBlock, 0, ptr(ids), ptr(src), ptr(out), n,
                   num_rows, C);
}

void CudaBackend::gather_nll(const Tensor& logits, const Tensor& targets, Tensor& out) {
  const int64_t rows = targets.numel(), V = logits.dim(-1);
  kernels_->launch("forge_gather_nll", grid_rows(rows, "gather_nll"), kBlock, 0, ptr(logits),
                   ptr(targets), ptr(out), rows, V);
}

void CudaBackend::ce_bwd(const Tensor& logits, const Tensor& targets, float scale, Tensor& out) {
  const int64_t rows = targets.numel(), V = logits.dim(-1);
  kernels_->launch("forge_ce_bwd", grid_rows(rows, "ce_bwd"), kBlock, 0, ptr(logits), ptr(targets),
                   ptr(out), rows, V, scale);
}

void CudaBackend::softmax_xent(const Tensor& targets, Tensor& logits, Tensor& nll) {
  const int64_t rows = targets.numel(), V = logits.dim(-1);
  kernels_->launch("forge_softmax_xent", grid_rows(rows, "softmax_xent"), kBlock, 0, ptr(targets),
                   ptr(logits), ptr(nll), rows, V);
}

// ---- attention heads --------------------------------------------------------------------
// Head-major tensors are [B*n_head, T, hd], token-major ones [B, T, n_head*hd].

void CudaBackend::split_heads(const Tensor& qkv, int64_t n_head, int part, Tensor& out) {
  const int64_t B = out.dim(0) / n_head, T = out.dim(1), hd = out.dim(2);
  kernels_->launch("forge_split_heads", grid_for(out.numel()), kBlock, 0, ptr(qkv), ptr(out), B, T,
                   n_head, hd, part);
}

void CudaBackend::merge_heads(const Tensor& x, int64_t n_head, Tensor& out) {
  const int64_t B = x.dim(0) / n_head, T = x.dim(1), hd = x.dim(2);
  kernels_->launch("forge_merge_heads", grid_for(out.numel()), kBlock, 0, ptr(x), ptr(out), B, T,
                   n_head, hd);
}

void CudaBackend::unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t n_head,
                               Tensor& out) {
  const int64_t B = dq.dim(0) / n_head, T = dq.dim(1), hd = dq.dim(2);
  kernels_->launch("forge_unsplit_head", grid_for(out.numel()), kBlock, 0, ptr(dq), ptr(dk),
                   ptr(dv), ptr(out), B, T, n_head, hd);
}

void CudaBackend::unmerge_heads(const Tensor& x, int64_t n_head, Tensor& out) {
  const int64_t B = out.dim(0) / n_head, T = out.dim(1), hd = out.dim(2);
  kernels_->launch("forge_unmerge_heads", grid_for(out.numel()), kBlock, 0, ptr(x), ptr(out), B, T,
                   n_head, hd);
}

}  // namespace forge::cuda
