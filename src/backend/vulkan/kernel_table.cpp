// The Vulkan backend's kernel table: every op of forge/op_table.def with the table's
// dtypes; attention_at only where a shader may bind kAttnDecodeBindings buffers; the fused
// ops' kernels decline the shapes their shaders do not take (the ops layer composes those).
#include "backend/vulkan/vulkan_backend.h"

namespace forge::vk {
namespace {

VulkanBackend& vk(Backend& b) { return static_cast<VulkanBackend&>(b); }
const VulkanBackend& vkc(const Backend& b) { return static_cast<const VulkanBackend&>(b); }

}  // namespace

void VulkanBackend::register_kernels() {
  using C = const OpCall&;
  add_kernel(Op::add, [](Backend& b, C c) { vk(b).add(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::gelu, [](Backend& b, C c) { vk(b).gelu(c.in(0), c.out(0)); });
  add_kernel(Op::matmul, [](Backend& b, C c) {
    vk(b).matmul(c.in(0), c.in(1), c.in(2), c.attrs.spec, c.attrs.accumulate, c.out(0));
  });
  add_kernel(
      Op::layernorm_matmul,
      [](Backend& b, C c) {
        vk(b).layernorm_matmul(c.in(0), c.in(1), c.in(2), c.attrs.eps, c.in(3), c.in(4),
                               c.attrs.spec, c.out(0));
      },
      [](const Backend& b, C c) { return vkc(b).takes_layernorm_matmul(c); });
  add_kernel(
      Op::matmul_add_layernorm_matmul,
      [](Backend& b, C c) {
        vk(b).matmul_add_layernorm_matmul(c.in(0), c.in(1), c.in(2), c.in(3), c.in(4), c.in(5),
                                          c.attrs.eps, c.in(6), c.in(7), c.attrs.spec, c.out(0),
                                          c.out(1));
      },
      [](const Backend& b, C c) { return vkc(b).takes_matmul_add_layernorm_matmul(c); });
  add_kernel(Op::softmax, [](Backend& b, C c) {
    vk(b).softmax(c.in(0), c.attrs.causal, c.attrs.offset, c.out(0));
  });
  add_kernel(Op::argmax_rows, [](Backend& b, C c) { vk(b).argmax_rows(c.in(0), c.out(0)); });
  add_kernel(Op::layernorm, [](Backend& b, C c) {
    vk(b).layernorm(c.in(0), c.in(1), c.in(2), c.attrs.eps, c.out(0));
  });
  add_kernel(Op::embedding, [](Backend& b, C c) {
    vk(b).embedding(c.in(0), c.in(1), c.attrs.row_begin, c.out(0));
  });
  add_kernel(Op::matmul_transb_into, [](Backend& b, C c) {
    vk(b).matmul_transb_into(c.in(0), c.in(1), c.attrs.alpha, c.attrs.col_begin, c.out(0));
  });
  add_kernel(Op::split_heads, [](Backend& b, C c) {
    vk(b).split_heads(c.in(0), c.attrs.n_head, c.attrs.part, c.out(0));
  });
  add_kernel(Op::merge_heads,
             [](Backend& b, C c) { vk(b).merge_heads(c.in(0), c.attrs.n_head, c.out(0)); });
  add_kernel(Op::kv_append,
             [](Backend& b, C c) { vk(b).kv_append(c.out(0), c.in(0), c.attrs.pos); });
  add_kernel(Op::attention, [](Backend& b, C c) {
    vk(b).attention(c.in(0), c.attrs.n_head, c.out(0), c.out(1), c.attrs.pos, c.out(2));
  });
  if (ctx_->max_bindings() >= kAttnDecodeBindings)
    add_kernel(Op::attention_at, [](Backend& b, C c) {
      vk(b).attention_at(c.in(0), c.attrs.n_head, c.out(0), c.out(1), c.in(1), c.out(2));
    });
  add_kernel(Op::gelu_bwd, [](Backend& b, C c) { vk(b).gelu_bwd(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::softmax_bwd,
             [](Backend& b, C c) { vk(b).softmax_bwd(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::layernorm_bwd, [](Backend& b, C c) {
    vk(b).layernorm_bwd(c.in(0), c.in(1), c.in(2), c.attrs.eps, c.out(0), c.out(1), c.out(2));
  });
  add_kernel(Op::sum_rows, [](Backend& b, C c) { vk(b).sum_rows(c.in(0), c.out(0)); });
  add_kernel(Op::scatter_add_rows,
             [](Backend& b, C c) { vk(b).scatter_add_rows(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::gather_nll, [](Backend& b, C c) { vk(b).gather_nll(c.in(0), c.in(1), c.out(0)); });
  add_kernel(Op::ce_bwd,
             [](Backend& b, C c) { vk(b).ce_bwd(c.in(0), c.in(1), c.attrs.scale, c.out(0)); });
  add_kernel(Op::dropout, [](Backend& b, C c) {
    vk(b).dropout(c.in(0), c.attrs.seed, c.attrs.threshold, c.attrs.scale, c.out(0));
  });
  add_kernel(Op::unsplit_head, [](Backend& b, C c) {
    vk(b).unsplit_head(c.in(0), c.in(1), c.in(2), c.attrs.n_head, c.out(0));
  });
  add_kernel(Op::unmerge_heads,
             [](Backend& b, C c) { vk(b).unmerge_heads(c.in(0), c.attrs.n_head, c.out(0)); });
  add_kernel(Op::sumsq, [](Backend& b, C c) { vk(b).sumsq(c.in(0), c.out(0)); });
  add_kernel(Op::scale, [](Backend& b, C c) { vk(b).scale(c.in(0), c.attrs.scale, c.out(0)); });
  add_kernel(Op::adamw, [](Backend& b, C c) {
    vk(b).adamw(c.out(0), c.in(0), c.out(1), c.out(2), c.attrs.adamw);
  });
}

}  // namespace forge::vk
