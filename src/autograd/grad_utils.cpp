// Gradient utilities over Parameters for training loops: global norm, clipping, zeroing.
#include <cmath>
#include <string>

#include "autograd/node.h"
#include "forge/device_queue.h"
#include "forge/ops.h"

namespace forge::ag {
using detail::fail;

double global_grad_norm(const std::vector<Parameter>& params) {
  // Every sum queued before the first is waited for: one wait, not one per parameter.
  std::vector<PendingRead> sums;
  for (const Parameter& p : params) {
    if (!p.defined()) fail(ErrorKind::Shape, "global_grad_norm", "empty Parameter handle");
    if (!p.has_grad()) continue;
    sums.push_back(read_async(sumsq(p.grad())));
  }
  double total = 0.0;
  for (PendingRead& s : sums) total += static_cast<double>(s.get<float>()[0]);
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
