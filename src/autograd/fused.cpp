// The fused functions of autograd.h: each runs its parts (whose backward rules are its
// backward) inside a FusedScope, so that the tape lists it as one op under ops.h's name.
#include <cmath>

#include "autograd/node.h"
#include "forge/autograd.h"

namespace forge::ag {
namespace {

std::shared_ptr<detail::TapeState> tape_of(const Var& v) {
  const auto& n = detail::Access::node(v);
  return n ? n->tape.lock() : nullptr;
}

/// matmul(h, w, spec without gelu, bias), then the GELU as its own part: its backward needs
/// the product, which the fused epilogue would not keep.
Var product(const Var& h, const Var& w, const MatmulSpec& spec, const Var& bias) {
  MatmulSpec s = spec;
  s.gelu = false;
  const Var y = matmul(h, w, s, bias);
  return spec.gelu ? gelu(y) : y;
}

}  // namespace

Var layernorm_matmul(const Var& x, const Var& gamma, const Var& beta, float eps, const Var& w,
                     const MatmulSpec& spec, const Var& bias) {
  const detail::FusedScope scope(tape_of(x), "layernorm_matmul");
  return product(layernorm(x, gamma, beta, eps), w, spec, bias);
}

std::array<Var, 2> matmul_add_layernorm_matmul(const Var& x, const Var& a, const Var& w1,
                                               const Var& b1, const Var& gamma, const Var& beta,
                                               float eps, const Var& w2, const MatmulSpec& spec2,
                                               const Var& b2, float p, uint64_t seed,
                                               uint64_t index0) {
  const detail::FusedScope scope(tape_of(x), "matmul_add_layernorm_matmul");
  const Var x_new = add(x, dropout(matmul(a, w1, {}, b1), p, seed, index0));
  return {x_new, product(layernorm(x_new, gamma, beta, eps), w2, spec2, b2)};
}

Var matmul_add(const Var& x, const Var& a, const Var& w, const Var& bias, float p, uint64_t seed,
               uint64_t index0) {
  const detail::FusedScope scope(tape_of(x), "matmul_add");
  return add(x, dropout(matmul(a, w, {}, bias), p, seed, index0));
}

Var attention(const Var& qkv, int64_t n_head, float p, uint64_t seed, uint64_t index0) {
  const detail::FusedScope scope(tape_of(qkv), "attention");
  const Shape& s = qkv.shape();
  if (s.rank() != 3 || n_head < 1 || s[2] % (3 * n_head) != 0)
    detail::fail(ErrorKind::Shape, "ag::attention",
                 "qkv must be [B, T, 3C] with C a multiple of n_head = " + std::to_string(n_head) +
                     ", got " + s.str());
  // Without dropout: the fused kernel forward, attention_bwd backward. With it, the chain
  // below, whose dropout mask is the probabilities' (keyed by their [B*H, T, T] index).
  if (p == 0.0f) return detail::attention_no_dropout(qkv, n_head);
  const int64_t hd = s[2] / (3 * n_head);
  const auto [q, k, v] = split_qkv(qkv, n_head);  // [B*H, T, hd]
  MatmulSpec qk;
  qk.trans_b = true;
  qk.alpha = 1.0f / std::sqrt(static_cast<float>(hd));
  const Var att =
      dropout(softmax(matmul(q, k, qk), /*causal=*/true), p, seed, index0);  // [B*H, T, T]
  return merge_heads(matmul(att, v), n_head);                                // [B, T, C]
}

}  // namespace forge::ag
