// What the op case files share (tests/op_cases*.cpp): input makers, tolerance helpers, the
// case list under construction, and each file's add_* function. The tolerances are stated
// once, at the top of tests/op_cases.cpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "forge/ops.h"
#include "op_cases.h"
#include "reference.h"

namespace forge::test::cases {

using ref::Vec;
using Dims = std::vector<int64_t>;
using Inputs = std::vector<HostTensor>;
using Outputs = std::vector<std::vector<float>>;
using Exp = std::vector<Expected>;
using InputsFn = std::function<Inputs(CaseRng&)>;
using RunFn = std::function<Outputs(const std::vector<Tensor>&)>;
using RefFn = std::function<Exp(const Inputs&)>;

inline constexpr double kFwdTol = 1e-4;
inline constexpr double kBwdTol = 1e-3;
// The absolute floor under bounds relative to each element: 4x float32's smallest normal
// (1.18e-38). Below it a float32 result keeps no relative precision (it is subnormal or
// flushed to 0), e.g. exp(-160) in a softmax row of range 80; every other value of the
// cases lies orders of magnitude above it (softmax over 50257 columns: ~1e-7 and up).
inline constexpr double kUnderflowFloor = 4.0 * 1.1754943508222875e-38;

inline int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}
inline size_t sz(int64_t n) { return static_cast<size_t>(n); }

inline std::string dims_str(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

inline HostTensor F(CaseRng& rng, Dims shape, float lo = -2.0f, float hi = 2.0f) {
  HostTensor t;
  t.f32 = rng.floats(sz(numel(shape)), lo, hi);
  t.shape = std::move(shape);
  return t;
}

inline HostTensor U(Dims shape, std::vector<uint32_t> ids) {
  HostTensor t;
  t.shape = std::move(shape);
  t.u32 = std::move(ids);
  t.is_u32 = true;
  return t;
}

/// n ids below `limit`, with limit - 1 first and 0 last so both ends of the range are hit.
inline std::vector<uint32_t> ids_with_ends(CaseRng& rng, size_t n, uint32_t limit) {
  std::vector<uint32_t> v = rng.ids(n, limit);
  if (n > 0) v.front() = limit - 1;
  if (n > 1) v.back() = 0;
  return v;
}

inline Vec W(const HostTensor& t) { return ref::widen(t.f32); }

inline Expected abs_tol(Vec v, double tol) {
  Expected e;
  e.tol.assign(v.size(), tol);
  e.value = std::move(v);
  return e;
}
inline Expected exact(Vec v) { return abs_tol(std::move(v), 0.0); }

inline std::vector<float> host(const Tensor& t) { return t.to_vector<float>(); }

class Cases {
 public:
  void add(const std::string& op, const std::string& variant, const std::string& shape,
           InputsFn inputs, RunFn run, RefFn reference, std::vector<int> mutates = {}) {
    OpCase c;
    c.op = op;
    c.name = op + "/" + (variant.empty() ? "" : variant + "/") + shape;
    c.inputs = [name = c.name, inputs = std::move(inputs)] {
      CaseRng rng(name);
      return inputs(rng);
    };
    c.run = std::move(run);
    c.reference = std::move(reference);
    c.mutates = std::move(mutates);
    list.push_back(std::move(c));
  }
  std::vector<OpCase> list;
};

// Each adds its ops' cases (op_cases_forward.cpp, op_cases_matmul.cpp,
// op_cases_training.cpp).
void add_elementwise(Cases& cs);
void add_matmul(Cases& cs);
void add_matmul_epilogues(Cases& cs);
void add_layernorm_matmul(Cases& cs);
void add_matmul_add_layernorm_matmul(Cases& cs);
void add_matmul_flags(Cases& cs);
void add_softmax(Cases& cs);
void add_argmax_rows(Cases& cs);
void add_attention_bwd(Cases& cs);
void add_layernorm(Cases& cs);
void add_embedding(Cases& cs);
void add_heads(Cases& cs);
void add_attention(Cases& cs);
void add_training(Cases& cs);
void add_weight_dtypes(Cases& cs);  // op_cases_weights.cpp

}  // namespace forge::test::cases
