// Validation helpers shared by the op functions. Each throws forge::Error with a message
// that starts with the op's name.
#pragma once

#include <cstdio>
#include <initializer_list>
#include <string>

#include "forge/backend.h"
#include "forge/error.h"
#include "forge/tensor.h"

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
    fail(ErrorKind::DType, op, std::string(name) + " must be " + dtype_name(want) + ", got " +
                                   dtype_name(t.dtype()) + " " + t.shape().str());
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
      fail(ErrorKind::Device, op, "tensors on different devices: " + first->device().str() +
                                      " and " + t->device().str());
    }
  }
  if (!first) fail(ErrorKind::Shape, op, "no defined input tensor");
  return backend_for(first->device());
}

inline void check_rank(const char* op, const char* name, const Tensor& t, size_t lo, size_t hi) {
  if (t.rank() < lo || t.rank() > hi)
    fail(ErrorKind::Shape, op, std::string(name) + " must have rank " + std::to_string(lo) +
                                   (hi != lo ? "-" + std::to_string(hi) : std::string()) +
                                   ", got " + t.shape().str());
}

/// rank >= lo (row ops need a last dimension).
inline void check_min_rank(const char* op, const char* name, const Tensor& t, size_t lo) {
  if (t.rank() < lo)
    fail(ErrorKind::Shape, op, std::string(name) + " must have rank >= " + std::to_string(lo) +
                                   ", got " + t.shape().str());
}

inline void check_same_shape(const char* op, const char* na, const Tensor& a, const char* nb,
                             const Tensor& b) {
  if (a.shape() != b.shape())
    fail(ErrorKind::Shape, op, std::string(na) + " " + a.shape().str() + " and " + nb + " " +
                                   b.shape().str() + " must have the same shape");
}

}  // namespace forge::ops_detail
