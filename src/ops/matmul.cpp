// matmul and its fused forms: validation and dispatch.
#include <string>
#include <utility>
#include <vector>

#include "forge/ops.h"
#include "ops/check.h"

namespace forge {
using namespace ops_detail;

namespace {

struct Resolved {
  Backend& be;
  std::vector<int64_t> dims;  // the output: [M, N], or [B, M, N] when an operand has a batch
};

// Validates a matmul's operands and matmul_add_'s acc (nullptr for matmul), errors naming
// `op`: dtypes, then devices, then shapes (acc's shape is the caller's to check). b may be
// f32 or a weight of any dtype the op table accepts; a non-f32 b is a 2-D [N, K] matrix used
// with trans_b (weights of those dtypes are stored [out, in], blocks along K).
Resolved resolve(const char* op, const Tensor* acc, const Tensor& a, const Tensor& b,
                 const MatmulSpec& spec, const Tensor& bias) {
  if (acc) check_f32(op, "acc", *acc);
  check_f32(op, "a", a);
  if (!b.defined()) fail(ErrorKind::Shape, op, "b is an undefined tensor");
  // Weights of the dtypes the op table accepts; the kernel is looked up by them.
  check_input_dtype(Op::matmul, 1, op, b.dtype(), b.shape().str());
  if (b.dtype() != DType::F32 && (b.rank() != 2 || !spec.trans_b))
    fail(ErrorKind::Shape, op,
         std::string("b of dtype ") + dtype_name(b.dtype()) +
             " must be a 2-D [N, K] matrix used with trans_b, got " + b.shape().str() +
             (spec.trans_b ? "" : " without trans_b"));
  if (bias.defined()) check_f32(op, "bias", bias);
  Backend& be = same_device(op, {acc ? acc : &a, &a, &b, &bias});
  check_rank(op, "a", a, 2, 3);
  check_rank(op, "b", b, 2, 3);
  if (a.rank() == 3 && b.rank() == 3 && a.dim(0) != b.dim(0))
    fail(ErrorKind::Shape, op,
         "batch sizes differ: a " + a.shape().str() + " vs b " + b.shape().str());
  const int64_t M = spec.trans_a ? a.dim(-1) : a.dim(-2);
  const int64_t Ka = spec.trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t b_stored_rows = b.dim(-2);
  if (spec.b_rows < 0 || spec.b_rows > b_stored_rows)
    fail(ErrorKind::Range, op,
         "b_rows " + std::to_string(spec.b_rows) + " outside [0, " + std::to_string(b_stored_rows) +
             "] for b " + b.shape().str());
  const int64_t b_rows = spec.b_rows > 0 ? spec.b_rows : b_stored_rows;
  const int64_t Kb = spec.trans_b ? b.dim(-1) : b_rows;
  const int64_t N = spec.trans_b ? b_rows : b.dim(-1);
  if (Ka != Kb)
    fail(ErrorKind::Shape, op,
         "inner dimensions differ: a " + a.shape().str() + (spec.trans_a ? " (transposed)" : "") +
             " vs b " + b.shape().str() + (spec.trans_b ? " (transposed)" : "") +
             (spec.b_rows > 0 ? " with b_rows " + std::to_string(b_rows) : ""));
  if (bias.defined() && (bias.rank() != 1 || bias.dim(0) != N))
    fail(ErrorKind::Shape, op,
         "bias must be [" + std::to_string(N) + "], got " + bias.shape().str());
  std::vector<int64_t> dims;
  if (a.rank() == 3)
    dims.push_back(a.dim(0));
  else if (b.rank() == 3)
    dims.push_back(b.dim(0));
  dims.push_back(M);
  dims.push_back(N);
  return {be, std::move(dims)};
}

// True when x and y are views of one storage whose element ranges intersect.
bool overlaps(const Tensor& x, const Tensor& y) {
  if (!x.defined() || !y.defined() || x.storage() != y.storage()) return false;
  const size_t x0 = x.offset(), x1 = x0 + static_cast<size_t>(x.numel());
  const size_t y0 = y.offset(), y1 = y0 + static_cast<size_t>(y.numel());
  return x0 < y1 && y0 < x1;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, const MatmulSpec& spec, const Tensor& bias) {
  const char* op = "matmul";
  const Resolved r = resolve(op, nullptr, a, b, spec, bias);
  Tensor out = Tensor::empty(Shape::checked(r.dims, op), DType::F32, a.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.spec = spec;
    run(r.be, op, Op::matmul, {&a, &b, &bias}, {&out}, at);
  }
  return out;
}

namespace {

// matmul_add_'s checks (errors naming `op`): acc (called `acc_name`) has the product's
// shape and, when the product is added into it in place, shares no memory with an operand.
Backend& check_matmul_add(const char* op, const char* acc_name, const Tensor& acc, const Tensor& a,
                          const Tensor& b, const MatmulSpec& spec, const Tensor& bias,
                          bool in_place) {
  const Resolved r = resolve(op, &acc, a, b, spec, bias);
  if (acc.shape().dims() != r.dims)
    fail(ErrorKind::Shape, op,
         std::string(acc_name) + " " + acc.shape().str() + " must be the product's shape " +
             Shape::checked(r.dims, op).str());
  // The kernels read acc once per element while reading a and b throughout: an acc sharing
  // memory with an operand would change it mid-product.
  if (in_place)
    for (const auto& [name, t] :
         {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}, {"bias", &bias}})
      if (overlaps(acc, *t))
        fail(ErrorKind::Shape, op, std::string(acc_name) + " overlaps " + name + " in memory");
  return r.be;
}

// layernorm_matmul's checks (errors naming `op`); the output's dims.
Resolved check_layernorm_matmul(const char* op, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, float eps, const Tensor& w,
                                const MatmulSpec& spec, const Tensor& bias) {
  check_f32(op, "gamma", gamma);
  check_f32(op, "beta", beta);
  Resolved r = resolve(op, nullptr, x, w, spec, bias);
  same_device(op, {&x, &gamma, &beta});
  if (spec.trans_a) fail(ErrorKind::Shape, op, "trans_a: the rows of x are what is normalized");
  check_row_param(op, "gamma", gamma, x);
  check_row_param(op, "beta", beta, x);
  check_eps(op, eps);
  return r;
}

}  // namespace

void matmul_add_(Tensor& acc, const Tensor& a, const Tensor& b, const MatmulSpec& spec,
                 const Tensor& bias) {
  const char* op = "matmul_add_";
  Backend& be = check_matmul_add(op, "acc", acc, a, b, spec, bias, true);
  // Tensors are contiguous by construction (views are reshapes and row ranges only).
  if (acc.numel() > 0) {
    OpAttrs at;
    at.spec = spec;
    at.accumulate = true;
    run(be, op, Op::matmul, {&a, &b, &bias}, {&acc}, at);
  }
}

Tensor layernorm_matmul(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        const Tensor& w, const MatmulSpec& spec, const Tensor& bias) {
  const char* op = "layernorm_matmul";
  const Resolved r = check_layernorm_matmul(op, x, gamma, beta, eps, w, spec, bias);
  Tensor out = Tensor::empty(Shape::checked(r.dims, op), DType::F32, x.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.eps = eps;
    at.spec = spec;
    run(r.be, op, Op::layernorm_matmul, {&x, &gamma, &beta, &w, &bias}, {&out}, at);
  }
  return out;
}

ResidualProduct matmul_add_layernorm_matmul(const Tensor& x, const Tensor& a, const Tensor& w1,
                                            const Tensor& b1, const Tensor& gamma,
                                            const Tensor& beta, float eps, const Tensor& w2,
                                            const MatmulSpec& spec2, const Tensor& b2,
                                            const MatmulSpec& spec1) {
  const char* op = "matmul_add_layernorm_matmul";
  if (spec1.gelu || spec1.alpha != 1.0f || spec1.b_rows != 0 || spec1.trans_a)
    fail(ErrorKind::Shape, op,
         "spec1 may only set trans_b (the residual product is x += a @ w1 + b1)");
  Backend& be = check_matmul_add(op, "x", x, a, w1, spec1, b1, /*in_place=*/false);
  const Resolved r = check_layernorm_matmul(op, x, gamma, beta, eps, w2, spec2, b2);
  ResidualProduct res{Tensor::empty(x.shape(), DType::F32, x.device()),
                      Tensor::empty(Shape::checked(r.dims, op), DType::F32, x.device())};
  if (x.numel() == 0) return res;  // out is then empty too: no rows
  if (res.out.numel() == 0) {      // w2 of no columns: x_new only
    res.x.copy_from(x);
    OpAttrs at;
    at.spec = spec1;
    at.accumulate = true;
    run(be, op, Op::matmul, {&a, &w1, &b1}, {&res.x}, at);
    return res;
  }
  OpAttrs at;
  at.eps = eps;
  at.spec = spec2;
  at.spec1 = spec1;
  run(be, op, Op::matmul_add_layernorm_matmul, {&x, &a, &w1, &b1, &gamma, &beta, &w2, &b2},
      {&res.x, &res.out}, at);
  return res;
}

}  // namespace forge
