// The fused ops as compositions of their parts, for backends without the fused kernel (or
// whose kernel declines the shapes). Bit for bit what the separate ops give.
#include <cmath>

#include "forge/ops.h"
#include "ops/dispatch.h"

namespace forge {

std::vector<Op> composition_parts(Op op) {
  switch (op) {
    case Op::layernorm_matmul: return {Op::layernorm, Op::matmul};
    case Op::matmul_add_layernorm_matmul: return {Op::matmul, Op::layernorm_matmul};
    case Op::softmax_xent: return {Op::gather_nll, Op::ce_bwd};
    case Op::attention_bwd:
      return {Op::split_heads, Op::matmul,        Op::softmax,
              Op::softmax_bwd, Op::unmerge_heads, Op::unsplit_head};
    default: return {};
  }
}

}  // namespace forge

namespace forge::ops_detail {

// out = matmul(layernorm(x, gamma, beta, eps), w, spec, bias)
void compose_layernorm_matmul(Backend& be, const OpCall& c) {
  const Tensor& x = c.in(0);
  Tensor h = Tensor::empty(x.shape(), DType::F32, x.device());
  OpAttrs ln;
  ln.eps = c.attrs.eps;
  run(be, c.function, Op::layernorm, {&x, c.inputs[1], c.inputs[2]}, {&h}, ln);
  OpAttrs mm;
  mm.spec = c.attrs.spec;
  run(be, c.function, Op::matmul, {&h, c.inputs[3], c.inputs[4]}, {c.outputs[0]}, mm);
}

// x_new = x + (a @ w1 + b1); out = layernorm_matmul(x_new, gamma, beta, eps, w2, spec, b2)
void compose_matmul_add_layernorm_matmul(Backend& be, const OpCall& c) {
  const Tensor& x = c.in(0);
  Tensor& x_new = c.out(0);
  const size_t bytes = static_cast<size_t>(x.numel()) * sizeof(float);
  be.copy(*x.storage(), x.offset() * sizeof(float), *x_new.storage(),
          x_new.offset() * sizeof(float), bytes);
  OpAttrs acc;
  acc.spec = c.attrs.spec1;
  acc.accumulate = true;
  run(be, c.function, Op::matmul, {c.inputs[1], c.inputs[2], c.inputs[3]}, {&x_new}, acc);
  OpAttrs lm;
  lm.eps = c.attrs.eps;
  lm.spec = c.attrs.spec;
  run(be, c.function, Op::layernorm_matmul,
      {&x_new, c.inputs[4], c.inputs[5], c.inputs[6], c.inputs[7]}, {c.outputs[1]}, lm);
}

// nll = gather_nll(logits, targets); logits = ce_bwd(logits, targets, 1) (through a
// temporary: a backend's ce_bwd need not run in place).
void compose_softmax_xent(Backend& be, const OpCall& c) {
  const Tensor& targets = c.in(0);
  Tensor& logits = c.out(0);
  run(be, c.function, Op::gather_nll, {&logits, &targets}, {c.outputs[1]});
  Tensor d = Tensor::empty(logits.shape(), DType::F32, logits.device());
  OpAttrs one;
  one.scale = 1.0f;
  run(be, c.function, Op::ce_bwd, {&logits, &targets}, {&d}, one);
  be.copy(*d.storage(), d.offset() * sizeof(float), *logits.storage(),
          logits.offset() * sizeof(float), static_cast<size_t>(logits.numel()) * sizeof(float));
}

// The probabilities recomputed from qkv, then the backward rules of the unfused chain
// softmax(q k^T / sqrt(hd), causal) v (out is not read):
//   dv = P^T dy_h, dP = dy_h v^T, dS = softmax_bwd(P, dP), dq = dS k / sqrt(hd),
//   dk = dS^T q / sqrt(hd); dqkv = unsplit_head(dq, dk, dv). P, dP and dS are [B*H, T, T]
//   for this call only.
void compose_attention_bwd(Backend& be, const OpCall& c) {
  const Tensor& qkv = c.in(0);
  const int64_t H = c.attrs.n_head;
  const Tensor q = split_heads(qkv, H, 0), k = split_heads(qkv, H, 1), v = split_heads(qkv, H, 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(q.dim(2)));
  MatmulSpec qk;
  qk.trans_b = true;
  qk.alpha = scale;
  const Tensor P = softmax(matmul(q, k, qk), /*causal=*/true);  // [B*H, T, T]
  const Tensor dyh = unmerge_heads(c.in(2), H);                 // [B*H, T, hd]
  MatmulSpec ta;
  ta.trans_a = true;
  const Tensor dv = matmul(P, dyh, ta);
  MatmulSpec tb;
  tb.trans_b = true;
  const Tensor dS = softmax_bwd(P, matmul(dyh, v, tb));
  MatmulSpec sa;
  sa.alpha = scale;
  const Tensor dq = matmul(dS, k, sa);
  sa.trans_a = true;
  const Tensor dk = matmul(dS, q, sa);
  const Tensor d = unsplit_head(dq, dk, dv, H);  // [B, T, 3C]
  Tensor& dqkv = c.out(0);
  be.copy(*d.storage(), d.offset() * sizeof(float), *dqkv.storage(), dqkv.offset() * sizeof(float),
          static_cast<size_t>(d.numel()) * sizeof(float));
}

}  // namespace forge::ops_detail
