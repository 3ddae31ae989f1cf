// Elementwise ops: add, add_, gelu, gelu_bwd, scale, scale_, dropout. Validation and
// dispatch only; the arithmetic lives in the backends.
#include <cmath>
#include <string>

#include "forge/ops.h"
#include "ops/check.h"

namespace forge {
using namespace ops_detail;

namespace {

// b matches a, or b is a row vector [C] with C = a.dim(-1).
void check_add_shapes(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() == b.shape()) return;
  if (a.rank() >= 1 && b.rank() == 1 && b.dim(0) == a.dim(-1)) return;
  fail(ErrorKind::Shape, op,
       "b " + b.shape().str() + " must equal a " + a.shape().str() + " or be a row vector [" +
           (a.rank() >= 1 ? std::to_string(a.dim(-1)) : "C") + "]");
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  const char* op = "add";
  check_f32(op, "a", a);
  check_f32(op, "b", b);
  Backend& be = same_device(op, {&a, &b});
  check_add_shapes(op, a, b);
  Tensor out = Tensor::empty(a.shape(), DType::F32, a.device());
  if (out.numel() > 0) run(be, op, Op::add, {&a, &b}, {&out});
  return out;
}

void add_(Tensor& a, const Tensor& b) {
  const char* op = "add_";
  check_f32(op, "a", a);
  check_f32(op, "b", b);
  Backend& be = same_device(op, {&a, &b});
  check_add_shapes(op, a, b);
  if (a.numel() > 0) run(be, op, Op::add, {&a, &b}, {&a});
}

Tensor gelu(const Tensor& x) {
  const char* op = "gelu";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  Tensor out = Tensor::empty(x.shape(), DType::F32, x.device());
  if (out.numel() > 0) run(be, op, Op::gelu, {&x}, {&out});
  return out;
}

Tensor gelu_bwd(const Tensor& x, const Tensor& dy) {
  const char* op = "gelu_bwd";
  check_f32(op, "x", x);
  check_f32(op, "dy", dy);
  Backend& be = same_device(op, {&x, &dy});
  check_same_shape(op, "x", x, "dy", dy);
  Tensor dx = Tensor::empty(x.shape(), DType::F32, x.device());
  if (dx.numel() > 0) run(be, op, Op::gelu_bwd, {&x, &dy}, {&dx});
  return dx;
}

Tensor scale(const Tensor& x, float s) {
  const char* op = "scale";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  Tensor out = Tensor::empty(x.shape(), DType::F32, x.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.scale = s;
    run(be, op, Op::scale, {&x}, {&out}, at);
  }
  return out;
}

void scale_(Tensor& x, float s) {
  const char* op = "scale_";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  if (x.numel() > 0) {
    OpAttrs at;
    at.scale = s;
    run(be, op, Op::scale, {&x}, {&x}, at);
  }
}

Tensor dropout(const Tensor& x, float p, uint64_t seed, uint64_t index0) {
  const char* op = "dropout";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  // Written so that NaN fails too.
  if (!(p >= 0.0f && p < 1.0f))
    fail(ErrorKind::Range, op, "p must be in [0, 1), got " + fmt_float(p));
  // The scale is computed here, once, so that every backend multiplies by the same float.
  const float keep_scale = 1.0f / (1.0f - p);
  Tensor out = Tensor::empty(x.shape(), DType::F32, x.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.scale = keep_scale;
    at.seed = seed;
    at.index0 = index0;
    at.threshold = dropout_threshold(p);
    run(be, op, Op::dropout, {&x}, {&out}, at);
  }
  return out;
}

}  // namespace forge
