// Row ops over the last dimension: softmax, layernorm, their backward rules, argmax_rows,
// sum_rows.
// Validation and dispatch only.
#include <cmath>
#include <string>

#include "forge/ops.h"
#include "ops/check.h"

namespace forge {
using namespace ops_detail;

Tensor softmax(const Tensor& x, bool causal, int64_t offset) {
  const char* op = "softmax";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  check_min_rank(op, "x", x, causal ? 2 : 1);
  // A negative offset would leave whole rows without a visible column; no caller needs it,
  // so it is rejected rather than given an arbitrary meaning.
  if (causal && offset < 0)
    fail(ErrorKind::Range, op, "causal offset must be >= 0, got " + std::to_string(offset));
  Tensor out = Tensor::empty(x.shape(), DType::F32, x.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.causal = causal;
    at.offset = causal ? offset : 0;
    run(be, op, Op::softmax, {&x}, {&out}, at);
  }
  return out;
}

Tensor softmax_bwd(const Tensor& y, const Tensor& dy) {
  const char* op = "softmax_bwd";
  check_f32(op, "y", y);
  check_f32(op, "dy", dy);
  Backend& be = same_device(op, {&y, &dy});
  check_min_rank(op, "y", y, 1);
  check_same_shape(op, "y", y, "dy", dy);
  Tensor dx = Tensor::empty(y.shape(), DType::F32, y.device());
  if (dx.numel() > 0) run(be, op, Op::softmax_bwd, {&y, &dy}, {&dx});
  return dx;
}

Tensor layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  const char* op = "layernorm";
  check_f32(op, "x", x);
  check_f32(op, "gamma", gamma);
  check_f32(op, "beta", beta);
  Backend& be = same_device(op, {&x, &gamma, &beta});
  check_min_rank(op, "x", x, 1);
  check_row_param(op, "gamma", gamma, x);
  check_row_param(op, "beta", beta, x);
  check_eps(op, eps);
  Tensor out = Tensor::empty(x.shape(), DType::F32, x.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.eps = eps;
    run(be, op, Op::layernorm, {&x, &gamma, &beta}, {&out}, at);
  }
  return out;
}

LayerNormGrads layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps) {
  const char* op = "layernorm_bwd";
  check_f32(op, "x", x);
  check_f32(op, "gamma", gamma);
  check_f32(op, "dy", dy);
  Backend& be = same_device(op, {&x, &gamma, &dy});
  check_min_rank(op, "x", x, 1);
  check_row_param(op, "gamma", gamma, x);
  check_same_shape(op, "x", x, "dy", dy);
  check_eps(op, eps);
  LayerNormGrads g;
  g.dx = Tensor::empty(x.shape(), DType::F32, x.device());
  // Zero-filled: with no rows the parameter gradients are sums over nothing.
  g.dgamma = Tensor::zeros(gamma.shape(), DType::F32, x.device());
  g.dbeta = Tensor::zeros(gamma.shape(), DType::F32, x.device());
  if (x.numel() > 0) {
    OpAttrs at;
    at.eps = eps;
    run(be, op, Op::layernorm_bwd, {&x, &gamma, &dy}, {&g.dx, &g.dgamma, &g.dbeta}, at);
  }
  return g;
}

namespace {

/// Checks argmax_rows' x; returns its rows.
int64_t argmax_rows_check(const char* op, const Tensor& x) {
  check_f32(op, "x", x);
  check_min_rank(op, "x", x, 1);
  const int64_t V = x.dim(-1), R = x.shape().rows();
  if (V == 0 && R > 0)
    fail(ErrorKind::Shape, op, "x " + x.shape().str() + " has rows of no elements: no argmax");
  if (V > int64_t{0xffffffff})
    fail(ErrorKind::Range, op,
         "rows of " + std::to_string(V) + " elements: indices past 2^32 - 1 do not fit U32");
  return R;
}

}  // namespace

Tensor argmax_rows(const Tensor& x) {
  const char* op = "argmax_rows";
  const int64_t R = argmax_rows_check(op, x);
  Backend& be = same_device(op, {&x});
  Tensor out = Tensor::empty({R}, DType::U32, x.device());
  if (R > 0) run(be, op, Op::argmax_rows, {&x}, {&out});
  return out;
}

void argmax_rows_into(const Tensor& x, Tensor& out) {
  const char* op = "argmax_rows_into";
  const int64_t R = argmax_rows_check(op, x);
  check_u32(op, "out", out);
  Backend& be = same_device(op, {&x, &out});
  if (out.shape() != Shape({R}))
    fail(ErrorKind::Shape, op,
         "out " + out.shape().str() + " for the " + std::to_string(R) + " rows of x " +
             x.shape().str());
  if (R > 0) run(be, op, Op::argmax_rows, {&x}, {&out});
}

Tensor sum_rows(const Tensor& x) {
  const char* op = "sum_rows";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  check_min_rank(op, "x", x, 1);
  // Zero-filled: with no rows the column sums are 0.
  Tensor out = Tensor::zeros({x.dim(-1)}, DType::F32, x.device());
  if (x.numel() > 0) run(be, op, Op::sum_rows, {&x}, {&out});
  return out;
}

}  // namespace forge
