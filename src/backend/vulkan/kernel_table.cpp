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
  add_op_methods(*this, ctx_->max_bindings() >= kAttnDecodeBindings);
  register_weight_kernels();
  using C = const OpCall&;
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
}

std::string VulkanBackend::why_unsupported(Op op) const {
  if (op == Op::attention_at && ctx_->max_bindings() < kAttnDecodeBindings)
    return "the device binds only " + std::to_string(ctx_->max_bindings()) +
           " storage buffers per shader, attention_at's kernel needs " +
           std::to_string(kAttnDecodeBindings);
  return "";
}

}  // namespace forge::vk
