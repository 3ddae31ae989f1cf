// The fused ops as compositions of their parts, for backends without the fused kernel (or
// whose kernel declines the shapes). Bit for bit what the separate ops give.
#include "ops/dispatch.h"

namespace forge {

std::vector<Op> composition_parts(Op op) {
  switch (op) {
    case Op::layernorm_matmul: return {Op::layernorm, Op::matmul};
    case Op::matmul_add_layernorm_matmul: return {Op::matmul, Op::layernorm_matmul};
    case Op::softmax_xent: return {Op::gather_nll, Op::ce_bwd};
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

}  // namespace forge::ops_detail
