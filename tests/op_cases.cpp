// The op case list (see op_cases.h). Tolerances, stated once here:
//   forward ops          1e-4 abs per element;
//   training ops         1e-3 abs per element;
//   long reductions      base * max(1, sum|terms| / 8) (matmul, LM head, sum_rows,
//                        scatter_add_rows, sumsq, layernorm dgamma/dbeta): float32 rounding
//                        grows with what is summed, and the reference reports that sum;
//   probabilities        relative (softmax 1e-4, softmax_bwd and ce_bwd 1e-3 of the element's
//                        own magnitude, over a floor at float32's underflow): with V = 50257
//                        every probability is ~2e-5, below any absolute tolerance worth
//                        having (a 1e-6 floor let a softmax missing 512 of its columns pass);
//   data movement        exact (embedding, heads, attention's cache rows), and
//                        masked/dropped entries exactly 0.
// Inputs are uniform [-2, 2] unless a case says otherwise; ids are in range, with the first
#include "op_cases.h"

#include <utility>

#include "op_case_util.h"

namespace forge::test {

Tensor HostTensor::to(Device device) const {
  if (is_u32) return Tensor::from_vector(u32, Shape(shape), device);
  if (dtype != DType::F32)
    return Tensor::from_bytes(raw.data(), raw.size(), Shape(shape), dtype, device);
  return Tensor::from_vector(f32, Shape(shape), device);
}

CaseRng::CaseRng(const std::string& seed_text) {
  // FNV-1a of the text: each case gets its own stream, stable across runs and platforms.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : seed_text) h = (h ^ c) * 0x100000001b3ull;
  state_ = h;
}

uint64_t CaseRng::next() {  // splitmix64
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float CaseRng::uniform(float lo, float hi) {
  const double u = static_cast<double>(next() >> 40) / 16777216.0;  // 24 bits in [0, 1)
  return static_cast<float>(lo + (hi - lo) * u);
}

std::vector<float> CaseRng::floats(size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) x = uniform(lo, hi);
  return v;
}

std::vector<uint32_t> CaseRng::ids(size_t n, uint32_t limit) {
  std::vector<uint32_t> v(n);
  for (uint32_t& x : v) x = static_cast<uint32_t>(next() % limit);
  return v;
}

double reduction_tol(double base, double abs_sum) { return base * std::max(1.0, abs_sum / 8.0); }

using namespace cases;

namespace {

std::vector<OpCase> build() {
  Cases cs;
  add_elementwise(cs);
  add_matmul(cs);
  add_matmul_epilogues(cs);
  add_layernorm_matmul(cs);
  add_matmul_add_layernorm_matmul(cs);
  add_softmax(cs);
  add_argmax_rows(cs);
  add_layernorm(cs);
  add_embedding(cs);
  add_heads(cs);
  add_attention(cs);
  add_attention_bwd(cs);
  add_training(cs);
  add_weight_dtypes(cs);
  return std::move(cs.list);
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> list = build();
  return list;
}

const std::vector<OpCase>& matmul_flag_cases() {
  static const std::vector<OpCase> list = [] {
    Cases cs;
    add_matmul_flags(cs);
    return std::move(cs.list);
  }();
  return list;
}

}  // namespace forge::test
