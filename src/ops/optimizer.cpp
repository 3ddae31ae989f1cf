// Optimizer-side ops: sumsq (for the gradient norm in clipping) and the AdamW update.
// Validation and dispatch only.
#include <cmath>
#include <string>

#include "forge/ops.h"
#include "ops/check.h"

namespace forge {
using namespace ops_detail;

Tensor sumsq(const Tensor& x) {
  const char* op = "sumsq";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  Tensor out = Tensor::zeros({1}, DType::F32, x.device());
  if (x.numel() > 0) run(be, op, Op::sumsq, {&x}, {&out});
  return out;
}

void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  const char* op = "adamw";
  check_f32(op, "param", param);
  check_f32(op, "grad", grad);
  check_f32(op, "m", m);
  check_f32(op, "v", v);
  Backend& be = same_device(op, {&param, &grad, &m, &v});
  check_same_shape(op, "param", param, "grad", grad);
  check_same_shape(op, "param", param, "m", m);
  check_same_shape(op, "param", param, "v", v);
  // Comparisons are written so that NaN fails them too.
  if (!(p.lr >= 0.0f) || !std::isfinite(p.lr))
    fail(ErrorKind::Range, op, "lr must be finite and >= 0, got " + fmt_float(p.lr));
  if (!(p.beta1 >= 0.0f && p.beta1 < 1.0f))
    fail(ErrorKind::Range, op, "beta1 must be in [0, 1), got " + fmt_float(p.beta1));
  if (!(p.beta2 >= 0.0f && p.beta2 < 1.0f))
    fail(ErrorKind::Range, op, "beta2 must be in [0, 1), got " + fmt_float(p.beta2));
  if (!(p.eps > 0.0f) || !std::isfinite(p.eps))
    fail(ErrorKind::Range, op, "eps must be finite and > 0, got " + fmt_float(p.eps));
  if (!(p.weight_decay >= 0.0f) || !std::isfinite(p.weight_decay))
    fail(ErrorKind::Range, op,
         "weight_decay must be finite and >= 0, got " + fmt_float(p.weight_decay));
  if (p.step < 1) fail(ErrorKind::Range, op, "step must be >= 1, got " + std::to_string(p.step));
  if (param.numel() > 0) {
    OpAttrs at;
    // The bias corrections, in double, once per call for every backend.
    const double t = static_cast<double>(p.step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
    at.adamw.decay = static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay);
    at.adamw.beta1 = p.beta1;
    at.adamw.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(p.beta1));
    at.adamw.beta2 = p.beta2;
    at.adamw.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(p.beta2));
    at.adamw.step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
    at.adamw.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    at.adamw.eps = p.eps;
    run(be, op, Op::adamw, {&grad}, {&param, &m, &v}, at);
  }
}

}  // namespace forge
