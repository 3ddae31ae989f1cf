// Attention head layout ops: split_heads / merge_heads, their inverses unsplit_head /
// unmerge_heads, and the in-place KV-cache append. Validation and dispatch only.
#include <string>

#include "forge/ops.h"
#include "ops/check.h"

namespace forge {
using namespace ops_detail;

namespace {

// x is [B*n_head, T, hd]: the head-major layout. Returns B.
int64_t check_head_major(const char* op, const char* name, const Tensor& x, int64_t n_head) {
  check_rank(op, name, x, 3, 3);
  if (x.dim(0) % n_head != 0)
    fail(ErrorKind::Shape, op,
         std::string(name) + " " + x.shape().str() + ": dim 0 is not a multiple of n_head " +
             std::to_string(n_head));
  return x.dim(0) / n_head;
}

}  // namespace

Tensor split_heads(const Tensor& qkv, int64_t n_head, int part) {
  const char* op = "split_heads";
  check_f32(op, "qkv", qkv);
  Backend& be = same_device(op, {&qkv});
  if (part < 0 || part > 2)
    fail(ErrorKind::Range, op, "part must be 0 (q), 1 (k) or 2 (v), got " + std::to_string(part));
  const QkvDims d = check_qkv(op, qkv, n_head);
  Tensor out = Tensor::empty(Shape::checked({dim_mul(op, d.B, n_head), d.T, d.C / n_head}, op),
                             DType::F32, qkv.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.n_head = n_head;
    at.part = part;
    run(be, op, Op::split_heads, {&qkv}, {&out}, at);
  }
  return out;
}

Tensor merge_heads(const Tensor& x, int64_t n_head) {
  const char* op = "merge_heads";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  check_n_head(op, n_head);
  const int64_t B = check_head_major(op, "x", x, n_head);
  Tensor out = Tensor::empty(Shape::checked({B, x.dim(1), dim_mul(op, n_head, x.dim(2))}, op),
                             DType::F32, x.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.n_head = n_head;
    run(be, op, Op::merge_heads, {&x}, {&out}, at);
  }
  return out;
}

Tensor unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t n_head) {
  const char* op = "unsplit_head";
  check_f32(op, "dq", dq);
  check_f32(op, "dk", dk);
  check_f32(op, "dv", dv);
  Backend& be = same_device(op, {&dq, &dk, &dv});
  check_n_head(op, n_head);
  check_same_shape(op, "dq", dq, "dk", dk);
  check_same_shape(op, "dq", dq, "dv", dv);
  const int64_t B = check_head_major(op, "dq", dq, n_head);
  Tensor out = Tensor::empty(
      Shape::checked({B, dq.dim(1), dim_mul(op, 3, dim_mul(op, n_head, dq.dim(2)))}, op),
      DType::F32, dq.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.n_head = n_head;
    run(be, op, Op::unsplit_head, {&dq, &dk, &dv}, {&out}, at);
  }
  return out;
}

Tensor unmerge_heads(const Tensor& x, int64_t n_head) {
  const char* op = "unmerge_heads";
  check_f32(op, "x", x);
  Backend& be = same_device(op, {&x});
  check_rank(op, "x", x, 2, 3);
  check_n_head(op, n_head);
  const int64_t C = x.dim(-1);
  check_divides(op, "C", C, n_head, x);
  const int64_t B = x.rank() == 3 ? x.dim(0) : 1;
  Tensor out = Tensor::empty(Shape::checked({dim_mul(op, B, n_head), x.dim(-2), C / n_head}, op),
                             DType::F32, x.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.n_head = n_head;
    run(be, op, Op::unmerge_heads, {&x}, {&out}, at);
  }
  return out;
}

}  // namespace forge
