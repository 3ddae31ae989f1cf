// The CPU's kernel table: every op of forge/op_table.def but the fused ones (their
// compositions are what the CPU runs), each with the table's dtypes.
#include "backend/cpu/cpu_backend.h"

namespace forge::cpu {
namespace {

CpuBackend& cpu(Backend& b) { return static_cast<CpuBackend&>(b); }

}  // namespace

CpuBackend::CpuBackend() {
  using C = const OpCall&;
  add_kernel(Op::add, [](Backend& b, C c) { cpu(b).add(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::gelu, [](Backend& b, C c) { cpu(b).gelu(c.in(0), c.out(0)); });
  add_kernel(Op::matmul, [](Backend& b, C c) {
    cpu(b).matmul(c.in(0), c.in(1), c.in(2), c.attrs.spec, c.attrs.accumulate, c.out(0));
  });
  add_kernel(Op::softmax, [](Backend& b, C c) {
    cpu(b).softmax(c.in(0), c.attrs.causal, c.attrs.offset, c.out(0));
  });
  add_kernel(Op::argmax_rows, [](Backend& b, C c) { cpu(b).argmax_rows(c.in(0), c.out(0)); });
  add_kernel(Op::layernorm, [](Backend& b, C c) {
    cpu(b).layernorm(c.in(0), c.in(1), c.in(2), c.attrs.eps, c.out(0));
  });
  add_kernel(Op::embedding, [](Backend& b, C c) {
    cpu(b).embedding(c.in(0), c.in(1), c.attrs.row_begin, c.out(0));
  });
  add_kernel(Op::matmul_transb_into, [](Backend& b, C c) {
    cpu(b).matmul_transb_into(c.in(0), c.in(1), c.attrs.alpha, c.attrs.col_begin, c.out(0));
  });
  add_kernel(Op::split_heads, [](Backend& b, C c) {
    cpu(b).split_heads(c.in(0), c.attrs.n_head, c.attrs.part, c.out(0));
  });
  add_kernel(Op::merge_heads,
             [](Backend& b, C c) { cpu(b).merge_heads(c.in(0), c.attrs.n_head, c.out(0)); });
  add_kernel(Op::kv_append,
             [](Backend& b, C c) { cpu(b).kv_append(c.out(0), c.in(0), c.attrs.pos); });
  add_kernel(Op::attention, [](Backend& b, C c) {
    cpu(b).attention(c.in(0), c.attrs.n_head, c.out(0), c.out(1), c.attrs.pos, c.out(2));
  });
  add_kernel(Op::attention_at, [](Backend& b, C c) {
    cpu(b).attention_at(c.in(0), c.attrs.n_head, c.out(0), c.out(1), c.in(1), c.out(2));
  });
  add_kernel(Op::gelu_bwd, [](Backend& b, C c) { cpu(b).gelu_bwd(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::softmax_bwd,
             [](Backend& b, C c) { cpu(b).softmax_bwd(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::layernorm_bwd, [](Backend& b, C c) {
    cpu(b).layernorm_bwd(c.in(0), c.in(1), c.in(2), c.attrs.eps, c.out(0), c.out(1), c.out(2));
  });
  add_kernel(Op::sum_rows, [](Backend& b, C c) { cpu(b).sum_rows(c.in(0), c.out(0)); });
  add_kernel(Op::scatter_add_rows,
             [](Backend& b, C c) { cpu(b).scatter_add_rows(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::gather_nll,
             [](Backend& b, C c) { cpu(b).gather_nll(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::ce_bwd,
             [](Backend& b, C c) { cpu(b).ce_bwd(c.in(0), c.in(1), c.attrs.scale, c.out(0)); });
  add_kernel(Op::dropout, [](Backend& b, C c) {
    cpu(b).dropout(c.in(0), c.attrs.seed, c.attrs.threshold, c.attrs.scale, c.out(0));
  });
  add_kernel(Op::unsplit_head, [](Backend& b, C c) {
    cpu(b).unsplit_head(c.in(0), c.in(1), c.in(2), c.attrs.n_head, c.out(0));
  });
  add_kernel(Op::unmerge_heads,
             [](Backend& b, C c) { cpu(b).unmerge_heads(c.in(0), c.attrs.n_head, c.out(0)); });
  add_kernel(Op::sumsq, [](Backend& b, C c) { cpu(b).sumsq(c.in(0), c.out(0)); });
  add_kernel(Op::scale, [](Backend& b, C c) { cpu(b).scale(c.in(0), c.attrs.scale, c.out(0)); });
  add_kernel(Op::adamw, [](Backend& b, C c) {
    cpu(b).adamw(c.out(0), c.in(0), c.out(1), c.out(2), c.attrs.adamw);
  });
}

}  // namespace forge::cpu
