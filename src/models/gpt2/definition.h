// GPT-2, written once. The same definition runs prefill, KV-cache decode and eval over
// tensors (src/models/gpt2/forward.cpp) and training over autograd Vars
// (src/train/loss_forward.cpp): both call the same ops, fused the same way
// (tests/test_gpt2_definition.cpp compares their op sequences).
//
//   x = drop(wte[tokens] + wpe[positions])                        x: [R, C] (R = B*T rows)
//   per block l:  x += drop(attn(ln_1(x)) @ W_proj + b_proj)
//                 x += drop(gelu(ln_2(x) @ W_fc + b_fc) @ W_fc_proj + b_fc_proj)
//   out = head(ln_f(head_rows(x)))
//
// The seams between sublayers are single fused ops: a residual update, then the next
// layernorm and product (matmul_add_layernorm_matmul; one dispatch for a decode step's row
// on a GPU). Dropout sites in HF GPT2LMHeadModel's order (site s draws its mask with
// dropout_site_seed(seed, s)): 0 the embeddings; 1 + 3 l block l's attention probabilities;
// 2 + 3 l its attention output; 3 + 3 l its MLP output.
//
// `Ops` is the set of ops for one kind of value (Tensor or ag::Var):
//   embedding(ids [R], table) -> [R, C];  add(a, b);  dropout(x, site)
//   layernorm(x, gamma, beta, eps);  layernorm_matmul(x, gamma, beta, eps, w, spec, bias)
//   matmul_add_layernorm_matmul(x, a, w1, b1, gamma, beta, eps, w2, spec2, b2, site, spec1)
//     -> {x_new, out};  matmul_add(x, a, w, spec, bias, site)   (x + drop(a @ w + bias))
//   spec(w, s): s for a product with weight w (trans_b for weights stored [out, in])
//   attention(layer, qkv [R, 3C], site) -> [R, C]  (with whatever cache the caller has)
//   head_rows(x): the rows the head needs;  head(h): logits, hidden states or the loss
// `W` has gpt2::Weights' fields (wte, wpe, layers with LayerWeights' fields, ln_f_w, ln_f_b).
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "forge/ops.h"

namespace forge::gpt2::definition {

/// The dropout site of block l's part: 0 attention probabilities, 1 attention output, 2 MLP
/// output.
inline uint64_t site(size_t l, uint64_t part) { return 1 + 3 * static_cast<uint64_t>(l) + part; }

/// The transformer blocks on the residual stream x [R, C].
template <class Ops, class Value, class Layer>
Value blocks(Ops& ops, Value x, const std::vector<Layer>& layers, float eps) {
  if (layers.empty()) return x;
  MatmulSpec gelu;
  gelu.gelu = true;
  // ln_1(x) W + b: [R, 3C]
  Value qkv = ops.layernorm_matmul(x, layers[0].ln_1_w, layers[0].ln_1_b, eps, layers[0].attn_w,
                                   ops.spec(layers[0].attn_w, {}), layers[0].attn_b);
  for (size_t l = 0;; ++l) {
    const Layer& L = layers[l];
    // x += attn @ W_proj + b, then gelu(ln_2(x) W_fc + b): [R, 4C]
    auto [x1, f] = ops.matmul_add_layernorm_matmul(
        x, ops.attention(l, qkv, site(l, 0)), L.attn_proj_w, L.attn_proj_b, L.ln_2_w, L.ln_2_b, eps,
        L.fc_w, ops.spec(L.fc_w, gelu), L.fc_b, site(l, 1), ops.spec(L.attn_proj_w, {}));
    if (l + 1 == layers.size())
      return ops.matmul_add(x1, f, L.fc_proj_w, ops.spec(L.fc_proj_w, {}), L.fc_proj_b, site(l, 2));
    // x += f @ W_fc_proj + b, then the next block's ln_1(x) W + b.
    const Layer& next = layers[l + 1];
    std::tie(x, qkv) = ops.matmul_add_layernorm_matmul(
        x1, f, L.fc_proj_w, L.fc_proj_b, next.ln_1_w, next.ln_1_b, eps, next.attn_w,
        ops.spec(next.attn_w, {}), next.attn_b, site(l, 2), ops.spec(L.fc_proj_w, {}));
  }
}

/// The whole forward: tokens and positions U32 [R] (host or trusted device ids).
template <class Ops, class W>
auto forward(Ops& ops, const W& w, const Tensor& tokens, const Tensor& positions, float eps) {
  auto x = ops.dropout(ops.add(ops.embedding(tokens, w.wte), ops.embedding(positions, w.wpe)), 0);
  x = blocks(ops, std::move(x), w.layers, eps);
  return ops.head(ops.layernorm(ops.head_rows(x), w.ln_f_w, w.ln_f_b, eps));
}

}  // namespace forge::gpt2::definition
