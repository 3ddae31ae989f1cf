// The list of op cases that tests/test_ops_reference.cpp runs on every device: one entry per
// (op, variant, shape), like ggml's test-backend-ops. Each case builds its inputs on the
// host, runs the forge op on a given device, and states the float64 reference result and a
// per-element tolerance. Adding a kernel to forge::Backend means adding its cases here;
// every backend then gets tested on them with no new test code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "forge/device.h"
#include "forge/op_table.h"
#include "forge/tensor.h"

namespace forge::test {

/// One input tensor on the host: F32 data, or U32 ids when is_u32, or weights of another
/// dtype: `raw` holds their stored bytes and f32 their values (what the reference uses).
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<uint32_t> u32;
  bool is_u32 = false;
  DType dtype = DType::F32;  // F16, BF16, Q8_0, Q4_0: raw is uploaded
  std::vector<uint8_t> raw;

  /// Uploads to `device` (a fresh tensor, so in-place ops cannot touch the host copy).
  Tensor to(Device device) const;
};

/// One expected output: values and the absolute tolerance of each element (0 = must be
/// bit-exact, for pure data movement and masked entries).
struct Expected {
  std::vector<double> value;
  std::vector<double> tol;
};

struct OpCase {
  /// "op/variant/shape", e.g. "matmul/ta=1,tb=0,bias,batch=b,b_rows=17/m=33,k=785,n=17".
  std::string name;
  /// The op's name (the prefix of `name`), for grouping and filtering.
  std::string op;
  /// Inputs; deterministic (the RNG is seeded from the case name).
  std::function<std::vector<HostTensor>()> inputs;
  /// Runs forge on tensors already on the device (same order as inputs()) and returns the
  /// outputs read back to the host. In-place ops return the tensors they modified.
  std::function<std::vector<std::vector<float>>(const std::vector<Tensor>&)> run;
  /// The float64 reference of every output, with tolerances.
  std::function<std::vector<Expected>(const std::vector<HostTensor>&)> reference;
  /// Indices of inputs the op may modify (in-place ops); all others must be left intact.
  std::vector<int> mutates;
  /// Kernels beyond the op table's dtypes that the case needs (weights of other dtypes: the
  /// matmul or embedding key); a device without one skips the case.
  std::vector<std::pair<Op, DTypeKey>> needs;
};

/// Every case, built once. Names are unique.
const std::vector<OpCase>& op_cases();
/// Every flag combination of matmul and matmul_add_ (trans_a, trans_b, bias, gelu,
/// accumulate) on shapes large enough for a GPU's big tile kernels: run on each of them.
const std::vector<OpCase>& matmul_flag_cases();

/// Deterministic uniform [-2, 2] floats and ids for inputs, seeded from a string.
class CaseRng {
 public:
  explicit CaseRng(const std::string& seed_text);
  float uniform(float lo = -2.0f, float hi = 2.0f);
  std::vector<float> floats(size_t n, float lo = -2.0f, float hi = 2.0f);
  /// n ids in [0, limit).
  std::vector<uint32_t> ids(size_t n, uint32_t limit);

 private:
  uint64_t next();
  uint64_t state_;
};

/// Tolerance of a long reduction: base * max(1, sum|terms| / 8). float32 accumulation error
/// grows with the magnitude of what is summed, not with the result (which may cancel).
double reduction_tol(double base, double abs_sum);

}  // namespace forge::test
