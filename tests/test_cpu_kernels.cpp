// Quick sanity checks of the CPU kernels against values computed here in double (the
// thorough float64 comparison of every op is tests/test_ops_reference.cpp): GELU and its
// backward, the causal softmax, the loss kernels on a long row, dropout's hash, the
// scatter's order, the AVX2 spans against the baseline loops, thread-count independence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/span_loops.h"  // the baseline build of the span loops
#include "backend/cpu/vec_kernels.h"
#include "forge/forge.h"

using namespace forge;

namespace {

std::vector<float> ramp(size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(i) / (n - 1);
  return v;
}

}  // namespace

TEST(CpuKernelSanity, GeluAndBackwardMatchTheTanhFormula) {
  // Wide range, odd length (vector tails), including saturated values.
  const std::vector<float> x = ramp(1001, -30.0f, 30.0f);
  const Tensor tx = Tensor::from_vector(x, {1001});
  const std::vector<float> y = gelu(tx).to_vector<float>();
  const std::vector<float> dx = gelu_bwd(tx, Tensor::full({1001}, 1.0f)).to_vector<float>();
  const double k0 = std::sqrt(2.0 / M_PI), k1 = 0.044715;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double u = k0 * (v + k1 * v * v * v);
    const double t = std::tanh(u);
    const double want = 0.5 * v * (1.0 + t);
    const double dwant = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k0 * (1.0 + 3.0 * k1 * v * v);
    EXPECT_NEAR(y[i], want, 1e-6 + 1e-6 * std::fabs(want)) << "x = " << v;
    EXPECT_NEAR(dx[i], dwant, 1e-5) << "x = " << v;
  }
}

TEST(CpuKernelSanity, CausalSoftmaxMasksExactlyAndNormalizes) {
  // [2, 3, 37]: two batches of T = 3 rows, S = 37 columns, offset 33: row i sees 34 + i.
  const int64_t T = 3, S = 37, off = 33;
  const std::vector<float> x = ramp(2 * T * S, -8.0f, 5.0f);
  const std::vector<float> y =
      softmax(Tensor::from_vector(x, {2, T, S}), true, off).to_vector<float>();
  for (int64_t r = 0; r < 2 * T; ++r) {
    const int64_t n = std::min<int64_t>(S, r % T + off + 1);
    double mx = -1e30, sum = 0.0;
    for (int64_t j = 0; j < n; ++j) mx = std::max<double>(mx, x[r * S + j]);
    for (int64_t j = 0; j < n; ++j) sum += std::exp(x[r * S + j] - mx);
    for (int64_t j = 0; j < S; ++j) {
      if (j < n) {
        EXPECT_NEAR(y[r * S + j], std::exp(x[r * S + j] - mx) / sum, 1e-6);
      } else {
        EXPECT_EQ(y[r * S + j], 0.0f) << "row " << r << " col " << j;
      }
    }
  }
}

TEST(CpuKernelSanity, GatherNllAndCeBwdOnALongRow) {
  const int64_t V = 5003;
  std::vector<float> x = ramp(2 * V, -20.0f, 20.0f);
  x[7] = 35.0f;  // a dominant logit
  const std::vector<uint32_t> t = {7, 4000};
  const Tensor tl = Tensor::from_vector(x, {2, V});
  const Tensor tt = Tensor::from_vector(t, {2});
  const std::vector<float> nll = gather_nll(tl, tt).to_vector<float>();
  const std::vector<float> d = ce_bwd(tl, tt, 0.25f).to_vector<float>();
  for (int64_t r = 0; r < 2; ++r) {
    double mx = -1e30, sum = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max<double>(mx, x[r * V + j]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[r * V + j] - mx);
    const double lse = mx + std::log(sum);
    EXPECT_NEAR(nll[r], lse - x[r * V + t[r]], 1e-5);
    for (int64_t j = 0; j < V; ++j) {
      const double want = (std::exp(x[r * V + j] - lse) - (j == t[r] ? 1.0 : 0.0)) * 0.25;
      EXPECT_NEAR(d[r * V + j], want, 1e-7 + 1e-5 * std::fabs(want)) << r << "," << j;
    }
  }
}

TEST(CpuKernelSanity, DropoutFollowsTheHashAndIsDeterministic) {
  const int64_t n = 10007;
  const float p = 0.3f;
  const Tensor x = Tensor::from_vector(ramp(n, -1.0f, 1.0f), {n});
  const std::vector<float> xv = x.to_vector<float>();
  const std::vector<float> y = dropout(x, p, 1234).to_vector<float>();
  EXPECT_EQ(y, dropout(x, p, 1234).to_vector<float>());
  const float s = 1.0f / (1.0f - p);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = (dropout_hash(1234, static_cast<uint64_t>(i)) >> 8) >= dropout_threshold(p);
    kept += keep;
    EXPECT_EQ(y[i], keep ? xv[i] * s : 0.0f) << i;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.7, 0.02);
  EXPECT_EQ(dropout(x, 0.0f, 99).to_vector<float>(), xv);  // p = 0 copies
}

TEST(CpuKernelSanity, ScatterAddIsInIndexOrderAndThreadCountIndependent) {
  // Many ids hitting few rows, wide enough rows to be split over threads.
  const int64_t N = 300, C = 200, rows = 7;
  std::vector<uint32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<uint32_t>((i * 5) % rows);
  const std::vector<float> src = ramp(N * C, -3.0f, 3.7f);
  const Tensor tid = Tensor::from_vector(ids, {N});
  const Tensor tsrc = Tensor::from_vector(src, {N, C});
  const int threads = num_threads();
  set_num_threads(1);
  const std::vector<float> one = scatter_add_rows(tid, tsrc, rows).to_vector<float>();
  set_num_threads(2);
  const std::vector<float> two = scatter_add_rows(tid, tsrc, rows).to_vector<float>();
  set_num_threads(threads);
  EXPECT_EQ(one, two);
  // The same float sums, in index order, by hand.
  std::vector<float> want(rows * C, 0.0f);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) want[ids[i] * C + c] += src[i * C + c];
  EXPECT_EQ(one, want);
}

// The AVX-512 dropout span hashes 16 indices at once and treats the high index word as
// constant per vector; check it where the flat index crosses 2^32 (a tensor that large is
// not needed: the span takes its first index as an argument).
TEST(CpuKernelSanity, DropoutSpanAcrossTheHighIndexWord) {
  if (!cpu::use_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or FORGE_SIMD caps it)";
  const int64_t n = 100;
  const std::vector<float> x = ramp(n, -1.0f, 1.0f);
  std::vector<float> y(n, -7.0f);
  const uint64_t seed = 0x123456789abcdefULL;
  const uint64_t index0 = (uint64_t{1} << 32) - 37;  // crosses inside the third vector
  const float p = 0.5f, s = 1.0f / (1.0f - p);
  cpu::dropout_avx512(x.data(), y.data(), n, index0, seed, dropout_threshold(p), s);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = (dropout_hash(seed, index0 + i) >> 8) >= dropout_threshold(p);
    EXPECT_EQ(y[i], keep ? x[i] * s : 0.0f) << i;
  }
}

// spans_avx2.cpp compiles span_loops.h for AVX2 + FMA; this file compiles it for the
// baseline. They agree to float rounding (FMA contraction may move an ulp), dropout exactly.
// This also tests the AVX2 build on machines whose pick() would choose AVX-512.
TEST(CpuKernelSanity, Avx2SpansMatchBaselineLoops) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    GTEST_SKIP() << "no AVX2 + FMA";
#else
  GTEST_SKIP() << "not x86-64";
#endif
  const int64_t n = 1037;  // odd: vector tails
  const std::vector<float> x = ramp(n, -40.0f, 40.0f), dy = ramp(n, 3.0f, -2.0f);
  const std::vector<float> g = ramp(n, 0.5f, 1.5f), b = ramp(n, -0.1f, 0.2f);
  std::vector<float> want(n), got(n);
  auto expect_same = [&](const char* what) {
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * (1.0f + std::fabs(want[i]))) << what << " at " << i;
  };
  cpu::gelu_loop(x.data(), want.data(), n);
  cpu::gelu_avx2(x.data(), got.data(), n);
  expect_same("gelu");
  cpu::gelu_bwd_loop(x.data(), dy.data(), want.data(), n);
  cpu::gelu_bwd_avx2(x.data(), dy.data(), got.data(), n);
  expect_same("gelu_bwd");
  cpu::softmax_row_loop(x.data(), want.data(), n, 0.5f);
  cpu::softmax_row_avx2(x.data(), got.data(), n, 0.5f);
  expect_same("softmax_row");
  cpu::layernorm_row_loop(x.data(), g.data(), b.data(), 1e-5f, want.data(), n);
  cpu::layernorm_row_avx2(x.data(), g.data(), b.data(), 1e-5f, got.data(), n);
  expect_same("layernorm_row");
  std::vector<float> acc0(2 * n, 0.25f), acc1(2 * n, 0.25f);  // dgamma | dbeta partials
  cpu::layernorm_bwd_row_loop(x.data(), g.data(), dy.data(), 1e-5f, want.data(), n, acc0.data(),
                              acc0.data() + n);
  cpu::layernorm_bwd_row_avx2(x.data(), g.data(), dy.data(), 1e-5f, got.data(), n, acc1.data(),
                              acc1.data() + n);
  expect_same("layernorm_bwd_row");
  for (int64_t i = 0; i < 2 * n; ++i)
    ASSERT_NEAR(acc0[i], acc1[i], 1e-6f * (1 + std::fabs(acc0[i])));
  cpu::dropout_loop(x.data(), want.data(), n, (uint64_t{1} << 32) - 500, 77, 1u << 23, 2.0f);
  cpu::dropout_avx2(x.data(), got.data(), n, (uint64_t{1} << 32) - 500, 77, 1u << 23, 2.0f);
  EXPECT_EQ(got, want) << "dropout";
  EXPECT_NEAR(cpu::logsumexp_loop(x.data(), n), cpu::logsumexp_avx2(x.data(), n), 1e-5f);
}

// The column reductions must not depend on how rows are split over threads.
TEST(CpuKernelSanity, ColumnReductionsAreThreadCountIndependent) {
  const int64_t R = 203, C = 300;  // 7 layernorm chunks (the last partial), 5 sum_rows bands
  const Tensor x = Tensor::from_vector(ramp(R * C, -3.0f, 2.0f), {R, C});
  const Tensor dy = Tensor::from_vector(ramp(R * C, 1.5f, -1.0f), {R, C});
  const Tensor g = Tensor::from_vector(ramp(C, 0.5f, 1.5f), {C});
  auto run = [&] {
    const LayerNormGrads lg = layernorm_bwd(x, g, dy);
    return std::vector<std::vector<float>>{
        lg.dx.to_vector<float>(), lg.dgamma.to_vector<float>(), lg.dbeta.to_vector<float>(),
        sum_rows(dy).to_vector<float>(), sumsq(dy).to_vector<float>()};
  };
  const int threads = num_threads();
  set_num_threads(1);
  const auto one = run();
  set_num_threads(2);
  const auto two = run();
  set_num_threads(threads);
  EXPECT_EQ(one, two);
  // dbeta is sum_rows(dy), however either is computed.
  for (int64_t c = 0; c < C; ++c)
    EXPECT_NEAR(one[2][c], one[3][c], 1e-4f * (1 + std::fabs(one[3][c])));
}
