// The Vulkan kernels over flat elements: add, scale, gelu and its backward, dropout, AdamW
// and sumsq. Each but dropout runs in windows of at most one binding (Context::
// window_elements), so that a table larger than a binding (GPT-2's wte, its gradient and
// AdamW moments on a 128 MiB device) needs no splitting outside the backend.
#include <algorithm>

#include "backend/vulkan/kernel_args.h"
#include "backend/vulkan/vulkan_backend.h"

namespace forge::vk {
namespace {

/// Calls f(begin, count) for windows covering [0, n), each of at most
/// ctx.window_elements(quantum) elements and starting at a multiple of quantum; f(0, 0)
/// when n = 0.
template <class F>
void for_windows(const Context& ctx, uint64_t n, uint64_t quantum, F&& f) {
  const uint64_t w = ctx.window_elements(quantum);
  if (n == 0) f(uint64_t{0}, uint64_t{0});
  for (uint64_t b = 0; b < n; b += w) f(b, std::min(w, n - b));
}

}  // namespace

void VulkanBackend::add(const Tensor& a, const Tensor& b, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  // b is a's shape, or a row added to every row: then windows hold whole rows, b whole.
  const uint64_t n = static_cast<uint64_t>(a.numel()), bn = static_cast<uint64_t>(b.numel());
  const bool same = bn == n;
  for_windows(*ctx_, n, same ? 1 : bn, [&](uint64_t b0, uint64_t k) {
    run_1d("add",
           {window(in(a), b0, k), same ? window(in(b), b0, k) : in(b), window(out(o), b0, k)},
           {u(k), u(same ? k : bn)}, k);
  });
}

void VulkanBackend::scale(const Tensor& x, float s, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  for_windows(*ctx_, x.numel(), 1, [&](uint64_t b0, uint64_t k) {
    run_1d("scale", {window(in(x), b0, k), window(out(o), b0, k)}, {u(k), f(s)}, k);
  });
}

void VulkanBackend::gelu(const Tensor& x, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  for_windows(*ctx_, x.numel(), 1, [&](uint64_t b0, uint64_t k) {
    run_1d("gelu", {window(in(x), b0, k), window(out(o), b0, k)}, {u(k)}, k);
  });
}

void VulkanBackend::gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  for_windows(*ctx_, x.numel(), 1, [&](uint64_t b0, uint64_t k) {
    run_1d("gelu_bwd", {window(in(x), b0, k), window(in(dy), b0, k), window(out(dx), b0, k)},
           {u(k)}, k);
  });
}

void VulkanBackend::dropout(const Tensor& x, uint64_t seed, uint64_t index0, uint32_t threshold,
                            float s, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  // One binding (activations fit one); the mask's index is index0 + the index in x, whose
  // 64-bit sum the shader forms from 32-bit halves.
  run_1d("dropout", {in(x), out(o)},
         {u(x.numel()), static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
          static_cast<uint32_t>(index0), static_cast<uint32_t>(index0 >> 32), threshold, f(s)},
         x.numel());
}

void VulkanBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                          const AdamWStep& k) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  for_windows(*ctx_, param.numel(), 1, [&](uint64_t b0, uint64_t n) {
    run_1d("adamw",
           {window(out(param), b0, n), window(in(grad), b0, n), window(out(m), b0, n),
            window(out(v), b0, n)},
           {u(n), f(k.decay), f(k.beta1), f(k.one_minus_beta1), f(k.beta2), f(k.one_minus_beta2),
            f(k.step_size), f(k.bc2_sqrt), f(k.eps)},
           n);
  });
}

void VulkanBackend::sumsq(const Tensor& x, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  // Pass 1: fixed chunks of 4096 elements, one workgroup each, into partials (windows of
  // whole chunks: the same partials in any windowing); pass 2: one workgroup adds the
  // partials. Both in a fixed order: deterministic.
  constexpr uint64_t kChunk = 4096;
  const uint64_t n = static_cast<uint64_t>(x.numel());
  const uint64_t groups = std::max<uint64_t>(1, (n + kChunk - 1) / kChunk);
  auto partial = ctx_->scratch(groups * sizeof(float));
  for_windows(*ctx_, n, kChunk, [&](uint64_t b0, uint64_t k) {
    const uint64_t g = std::max<uint64_t>(1, (k + kChunk - 1) / kChunk);
    run_rows("sumsq_partial", {window(in(x), b0, k), window(whole(*partial, true), b0 / kChunk, g)},
             {u(k), u(kChunk), 1}, g);
  });
  run_rows("sumsq_partial", {whole(*partial, false), out(o)}, {u(groups), u(groups), 0}, 1);
}

}  // namespace forge::vk
