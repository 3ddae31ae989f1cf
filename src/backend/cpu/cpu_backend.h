// The CPU backend: host memory, the thread pool, SIMD kernels. Reference semantics for
// every other backend, and fast. Kernels live in one file per family:
//   host_memory.cpp, cpu_backend.cpp  storage (large blocks recycled) and device info
//   matmul.cpp + gemm*.cpp         matmul, LM head (packed, register-tiled GEMM; GEMV for m=1)
//   elementwise.cpp                add, gelu, gelu_bwd, scale, dropout, adamw, sumsq
//   rows.cpp                       softmax, layernorm (+ backward), sum_rows, argmax_rows
//   gather.cpp                     embedding, scatter_add_rows, gather_nll, ce_bwd
//   heads.cpp                      split/merge heads and their inverses, kv_append
//   attention.cpp (+ _avx2/_avx512) fused causal attention (attention_loops.h: the tile)
//   kernel_table.cpp               the op table's kernels, registered
#pragma once

#include "forge/backend.h"

namespace forge::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend();  // fills the kernel table (kernel_table.cpp)
  DeviceInfo info() const override;
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  std::shared_ptr<Storage> allocate_zeros(size_t bytes) override;
  void write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) override;
  void read(const Storage& src, size_t src_offset, void* dst, size_t bytes) override;
  void copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
            size_t bytes) override;

  // The kernels (registered in kernels.cpp's table; shapes as in forge/ops.h).
  void add(const Tensor& a, const Tensor& b, Tensor& out);
  void gelu(const Tensor& x, Tensor& out);
  void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulSpec& spec,
              bool accumulate, Tensor& out);
  void softmax(const Tensor& x, bool causal, int64_t offset, Tensor& out);
  void layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out);
  void embedding(const Tensor& ids, const Tensor& table, int64_t row_begin, Tensor& out);
  void matmul_transb_into(const Tensor& a, const Tensor& chunk, float alpha, int64_t col_begin,
                          Tensor& out);
  void split_heads(const Tensor& qkv, int64_t n_head, int part, Tensor& out);
  void merge_heads(const Tensor& x, int64_t n_head, Tensor& out);
  void kv_append(Tensor& cache, const Tensor& x, int64_t pos);
  void attention(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache, int64_t pos,
                 Tensor& out);
  void attention_at(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                    const Tensor& pos, Tensor& out);

  void gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx);
  void softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx);
  void layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps, Tensor& dx,
                     Tensor& dgamma, Tensor& dbeta);
  void sum_rows(const Tensor& x, Tensor& out);
  void argmax_rows(const Tensor& x, Tensor& out);
  void scatter_add_rows(const Tensor& ids, const Tensor& src, Tensor& out);
  void gather_nll(const Tensor& logits, const Tensor& targets, Tensor& out);
  void ce_bwd(const Tensor& logits, const Tensor& targets, float scale, Tensor& out);
  void dropout(const Tensor& x, uint64_t seed, uint32_t threshold, float scale, Tensor& out);
  void unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t n_head,
                    Tensor& out);
  void unmerge_heads(const Tensor& x, int64_t n_head, Tensor& out);
  void sumsq(const Tensor& x, Tensor& out);
  void scale(const Tensor& x, float s, Tensor& out);
  void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p);
};

}  // namespace forge::cpu
