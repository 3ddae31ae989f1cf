// Kernels written as member functions typed after forge/ops.h (the CPU's and the GPU
// backends' are written so): FORGE_OP_METHODS declares them inside the backend's class, and
// add_op_methods(*this) registers each for the op table's dtypes. Fused ops are not among
// them (a backend registers its own, or gets their compositions). A backend may as well
// register free functions with Backend::add_kernel directly.
#pragma once

#include "forge/backend.h"

// clang-format off
#define FORGE_OP_METHODS \
  void add(const Tensor& a, const Tensor& b, Tensor& out); \
  void gelu(const Tensor& x, Tensor& out); \
  void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulSpec& spec, \
              bool accumulate, Tensor& out); \
  void softmax(const Tensor& x, bool causal, int64_t offset, Tensor& out); \
  void layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out); \
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out); \
  void split_heads(const Tensor& qkv, int64_t n_head, int part, Tensor& out); \
  void merge_heads(const Tensor& x, int64_t n_head, Tensor& out); \
  void attention(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache, int64_t pos, \
                 Tensor& out); \
  void attention_at(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache, \
                    const Tensor& pos, Tensor& out); \
  void gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx); \
  void softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx); \
  void layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps, Tensor& dx, \
                     Tensor& dgamma, Tensor& dbeta); \
  void sum_rows(const Tensor& x, Tensor& out); \
  void argmax_rows(const Tensor& x, Tensor& out); \
  void scatter_add_rows(const Tensor& ids, const Tensor& src, Tensor& out); \
  void gather_nll(const Tensor& logits, const Tensor& targets, Tensor& out); \
  void ce_bwd(const Tensor& logits, const Tensor& targets, float scale, Tensor& out); \
  void dropout(const Tensor& x, uint64_t seed, uint64_t index0, uint32_t threshold, float scale, \
               Tensor& out); \
  void unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t n_head, \
                    Tensor& out); \
  void unmerge_heads(const Tensor& x, int64_t n_head, Tensor& out); \
  void sumsq(const Tensor& x, Tensor& out); \
  void scale(const Tensor& x, float s, Tensor& out); \
  void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& k);
// clang-format on

namespace forge {

template <class B>
void add_op_methods(B& be, bool with_attention_at = true) {
  using C = const OpCall&;
  be.add_kernel(Op::add,
                [](Backend& b, C c) { static_cast<B&>(b).add(c.in(0), c.in(1), c.out(0)); });
  be.add_kernel(Op::gelu, [](Backend& b, C c) { static_cast<B&>(b).gelu(c.in(0), c.out(0)); });
  be.add_kernel(Op::matmul, [](Backend& b, C c) {
    static_cast<B&>(b).matmul(c.in(0), c.in(1), c.in(2), c.attrs.spec, c.attrs.accumulate,
                              c.out(0));
  });
  be.add_kernel(Op::softmax, [](Backend& b, C c) {
    static_cast<B&>(b).softmax(c.in(0), c.attrs.causal, c.attrs.offset, c.out(0));
  });
  be.add_kernel(Op::argmax_rows,
                [](Backend& b, C c) { static_cast<B&>(b).argmax_rows(c.in(0), c.out(0)); });
  be.add_kernel(Op::layernorm, [](Backend& b, C c) {
    static_cast<B&>(b).layernorm(c.in(0), c.in(1), c.in(2), c.attrs.eps, c.out(0));
  });
  be.add_kernel(Op::embedding,
                [](Backend& b, C c) { static_cast<B&>(b).embedding(c.in(0), c.in(1), c.out(0)); });
  be.add_kernel(Op::split_heads, [](Backend& b, C c) {
    static_cast<B&>(b).split_heads(c.in(0), c.attrs.n_head, c.attrs.part, c.out(0));
  });
  be.add_kernel(Op::merge_heads, [](Backend& b, C c) {
    static_cast<B&>(b).merge_heads(c.in(0), c.attrs.n_head, c.out(0));
  });
  be.add_kernel(Op::attention, [](Backend& b, C c) {
    static_cast<B&>(b).attention(c.in(0), c.attrs.n_head, c.out(0), c.out(1), c.attrs.pos,
                                 c.out(2));
  });
  if (with_attention_at)
    be.add_kernel(Op::attention_at, [](Backend& b, C c) {
      static_cast<B&>(b).attention_at(c.in(0), c.attrs.n_head, c.out(0), c.out(1), c.in(1),
                                      c.out(2));
    });
  be.add_kernel(Op::gelu_bwd,
                [](Backend& b, C c) { static_cast<B&>(b).gelu_bwd(c.in(0), c.in(1), c.out(0)); });
  be.add_kernel(Op::softmax_bwd, [](Backend& b, C c) {
    static_cast<B&>(b).softmax_bwd(c.in(0), c.in(1), c.out(0));
  });
  be.add_kernel(Op::layernorm_bwd, [](Backend& b, C c) {
    static_cast<B&>(b).layernorm_bwd(c.in(0), c.in(1), c.in(2), c.attrs.eps, c.out(0), c.out(1),
                                     c.out(2));
  });
  be.add_kernel(Op::sum_rows,
                [](Backend& b, C c) { static_cast<B&>(b).sum_rows(c.in(0), c.out(0)); });
  be.add_kernel(Op::scatter_add_rows, [](Backend& b, C c) {
    static_cast<B&>(b).scatter_add_rows(c.in(0), c.in(1), c.out(0));
  });
  be.add_kernel(Op::gather_nll,
                [](Backend& b, C c) { static_cast<B&>(b).gather_nll(c.in(0), c.in(1), c.out(0)); });
  be.add_kernel(Op::ce_bwd, [](Backend& b, C c) {
    static_cast<B&>(b).ce_bwd(c.in(0), c.in(1), c.attrs.scale, c.out(0));
  });
  be.add_kernel(Op::dropout, [](Backend& b, C c) {
    static_cast<B&>(b).dropout(c.in(0), c.attrs.seed, c.attrs.index0, c.attrs.threshold,
                               c.attrs.scale, c.out(0));
  });
  be.add_kernel(Op::unsplit_head, [](Backend& b, C c) {
    static_cast<B&>(b).unsplit_head(c.in(0), c.in(1), c.in(2), c.attrs.n_head, c.out(0));
  });
  be.add_kernel(Op::unmerge_heads, [](Backend& b, C c) {
    static_cast<B&>(b).unmerge_heads(c.in(0), c.attrs.n_head, c.out(0));
  });
  be.add_kernel(Op::sumsq, [](Backend& b, C c) { static_cast<B&>(b).sumsq(c.in(0), c.out(0)); });
  be.add_kernel(Op::scale, [](Backend& b, C c) {
    static_cast<B&>(b).scale(c.in(0), c.attrs.scale, c.out(0));
  });
  be.add_kernel(Op::adamw, [](Backend& b, C c) {
    static_cast<B&>(b).adamw(c.out(0), c.in(0), c.out(1), c.out(2), c.attrs.adamw);
  });
}

}  // namespace forge
