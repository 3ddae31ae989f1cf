// What the autograd test files share (test_autograd.cpp, test_autograd_training.cpp):
// random tensors, float64 copies, a tolerance check and an error check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "forge/error.h"
#include "forge/tensor.h"

namespace forge::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float std = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor randt(const Shape& s, uint32_t seed, float std = 1.0f, float mean = 0.0f) {
  return Tensor::from_vector(randn(static_cast<size_t>(s.numel()), seed, std, mean), s);
}

inline std::vector<double> to_d(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  return {v.begin(), v.end()};
}

/// |got - want| <= tol * (1 + |want|) elementwise.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double tol,
                         const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  const std::vector<float> g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " element " << i;
}

/// Expects `fn` to throw forge::Error of `kind` whose message starts with `prefix`.
inline void expect_error(const std::function<void()>& fn, ErrorKind kind,
                         const std::string& prefix) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one starting with '" << prefix << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
  }
}

}  // namespace forge::test
