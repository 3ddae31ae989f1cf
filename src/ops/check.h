// Validation helpers shared by the op functions. Each throws forge::Error with a message
// that starts with the op's name.
#pragma once

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>

#include "forge/backend.h"
#include "forge/error.h"
#include "forge/tensor.h"
#include "ops/dispatch.h"

namespace forge::ops_detail {

[[noreturn]] inline void fail(ErrorKind kind, const char* op, const std::string& what) {
  throw Error(kind, std::string(op) + ": " + what);
}

/// A float for an error message: "0.5", "1e-08", "nan" (std::to_string prints "0.000000").
inline std::string fmt_float(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// The tensor is defined and of the given dtype.
inline void check_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  if (!t.defined()) fail(ErrorKind::Shape, op, std::string(name) + " is an undefined tensor");
  if (t.dtype() != want)
    fail(ErrorKind::DType, op,
         std::string(name) + " must be " + dtype_name(want) + ", got " + dtype_name(t.dtype()) +
             " " + t.shape().str());
}

inline void check_f32(const char* op, const char* name, const Tensor& t) {
  check_dtype(op, name, t, DType::F32);
}

inline void check_u32(const char* op, const char* name, const Tensor& t) {
  check_dtype(op, name, t, DType::U32);
}

/// All (defined) tensors live on one device; returns its backend.
inline Backend& same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      fail(ErrorKind::Device, op,
           "tensors on different devices: " + first->device().str() + " and " + t->device().str());
    }
  }
  if (!first) fail(ErrorKind::Shape, op, "no defined input tensor");
  return backend_for(first->device());
}

inline void check_rank(const char* op, const char* name, const Tensor& t, size_t lo, size_t hi) {
  if (t.rank() < lo || t.rank() > hi)
    fail(ErrorKind::Shape, op,
         std::string(name) + " must have rank " + std::to_string(lo) +
             (hi != lo ? "-" + std::to_string(hi) : std::string()) + ", got " + t.shape().str());
}

/// rank >= lo (row ops need a last dimension).
inline void check_min_rank(const char* op, const char* name, const Tensor& t, size_t lo) {
  if (t.rank() < lo)
    fail(ErrorKind::Shape, op,
         std::string(name) + " must have rank >= " + std::to_string(lo) + ", got " +
             t.shape().str());
}

inline void check_same_shape(const char* op, const char* na, const Tensor& a, const char* nb,
                             const Tensor& b) {
  if (a.shape() != b.shape())
    fail(ErrorKind::Shape, op,
         std::string(na) + " " + a.shape().str() + " and " + nb + " " + b.shape().str() +
             " must have the same shape");
}

// --- attention heads (heads.cpp, attention.cpp) ---

inline void check_n_head(const char* op, int64_t n_head) {
  if (n_head < 1) fail(ErrorKind::Range, op, "n_head must be >= 1, got " + std::to_string(n_head));
}

// C (the channels that the heads share) divisible by n_head.
inline void check_divides(const char* op, const char* what, int64_t C, int64_t n_head,
                          const Tensor& t) {
  if (C % n_head != 0)
    fail(ErrorKind::Shape, op,
         "n_head " + std::to_string(n_head) + " does not divide " + what + " " + std::to_string(C) +
             " of " + t.shape().str());
}

// a * b for a dimension, without overflow (possible when another dimension is 0, so that
// divisibility no longer bounds n_head).
inline int64_t dim_mul(const char* op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorKind::Shape, op,
         "dimension " + std::to_string(a) + " * " + std::to_string(b) + " overflows");
  return r;
}

/// The dimensions of a fused projection output qkv: [B, T, 3C] or [T, 3C] (B = 1).
struct QkvDims {
  int64_t B = 1, T = 0, C = 0;
};
/// qkv is F32 of rank 2-3 with a last dimension 3C, C divisible by n_head >= 1.
inline QkvDims check_qkv(const char* op, const Tensor& qkv, int64_t n_head) {
  check_f32(op, "qkv", qkv);
  check_rank(op, "qkv", qkv, 2, 3);
  check_n_head(op, n_head);
  const int64_t C3 = qkv.dim(-1);
  if (C3 % 3 != 0)
    fail(ErrorKind::Shape, op,
         "last dimension of qkv " + qkv.shape().str() + " is not a multiple of 3");
  QkvDims d;
  d.C = C3 / 3;
  check_divides(op, "C", d.C, n_head, qkv);
  d.B = qkv.rank() == 3 ? qkv.dim(0) : 1;
  d.T = qkv.dim(-2);
  return d;
}

/// eps of a layernorm: finite and >= 0.
inline void check_eps(const char* op, float eps) {
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    fail(ErrorKind::Range, op, "eps must be finite and >= 0, got " + fmt_float(eps));
}

// gamma (and beta) must be [C] for x [..., C].
inline void check_row_param(const char* op, const char* name, const Tensor& p, const Tensor& x) {
  if (p.rank() != 1 || p.dim(0) != x.dim(-1))
    fail(ErrorKind::Shape, op,
         std::string(name) + " must be [" + std::to_string(x.dim(-1)) + "] for x " +
             x.shape().str() + ", got " + p.shape().str());
}

}  // namespace forge::ops_detail
