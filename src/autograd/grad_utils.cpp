// Gradient utilities over Parameters for training loops: global norm, clipping, zeroing.
#include <cmath>
#include <string>

#include "autograd/node.h"
#include "forge/ops.h"

namespace forge::ag {
using detail::fail;

double global_grad_norm(const std::vector<Parameter>& params) {
  double total = 0.0;
  for (const Parameter& p : params) {
    if (!p.defined()) fail(ErrorKind::Shape, "global_grad_norm", "empty Parameter handle");
    if (!p.has_grad()) continue;
    total += static_cast<double>(sumsq(p.grad()).to_vector<float>()[0]);
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Parameter>& params, double max_norm) {
  const char* op = "clip_grad_norm";
  if (!std::isfinite(max_norm) || max_norm <= 0.0)
    fail(ErrorKind::Range, op, "max_norm must be finite and > 0, got " + std::to_string(max_norm));
  const double norm = global_grad_norm(params);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const float coef = static_cast<float>(max_norm / (norm + 1e-6));
  for (const Parameter& p : params) {
    if (!p.has_grad()) continue;
    Tensor g = p.grad();  // a handle: scale_ writes the parameter's gradient buffer
    scale_(g, coef);
  }
  return norm;
}

void zero_grad(const std::vector<Parameter>& params) {
  for (const Parameter& p : params) {
    if (!p.defined()) fail(ErrorKind::Shape, "zero_grad", "empty Parameter handle");
    p.zero_grad();
  }
}

}  // namespace forge::ag
