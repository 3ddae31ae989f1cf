// The cuda device's "precision" setting (cuda_backend.h), on a GPU (tools/gpu_tests.sh; they
// skip without one):
//  - one 256^3 product under fp32, tf32 and bf16 against float64: each within its rounding,
//    and bf16 equal to the float64 product of the operands rounded to bf16 (as io/half.h
//    rounds) up to fp32 sums;
//  - bf16 products of every operand layout (transposed, batched, a shared b, b_rows, widths
//    that are not a multiple of 8, which the bf16 copies pad) against the CPU's fp32 product
//    of the rounded operands;
//  - attention's 64-row tiles on tensor cores (forward, split keys, gradient) against the CPU
//    within bf16's rounding;
//  - a tiny GPT-2 trained under bf16: losses within 2% of fp32's step by step but not the same
//    bits, every weight still fp32, and a run saved and resumed half-way bit-identical to one
//    run straight through.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "cuda_test_util.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "forge/tensor.h"
#include "forge/train.h"
#include "io/half.h"
#include "train_test_util.h"

namespace {

using namespace forge;

using cuda::test::have_gpu;
using cuda::test::launches_by_kernel;
using cuda::test::sin_fill;

// Sets the device's precision for one scope, then back to fp32 (the default).
class ScopedPrecision {
 public:
  ScopedPrecision(Device d, const char* precision) : d_(d) {
    set_device_setting(d_, "precision", precision);
  }
  ~ScopedPrecision() { set_device_setting(d_, "precision", "fp32"); }
  ScopedPrecision(const ScopedPrecision&) = delete;
  ScopedPrecision& operator=(const ScopedPrecision&) = delete;

 private:
  Device d_;
};

float round_bf16(float f) { return io::bf16_to_f32(io::f32_to_bf16_bits(f)); }

TEST(CudaPrecisionOnGpu, EachPrecisionChangesTheProductWithinItsRounding) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const Device dev("cuda", 0);
  const int64_t n = 256;
  std::vector<float> a(n * n), b(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
    b[i] = std::cos(0.11f * static_cast<float>(i)) - 0.2f;
  }
  // want: the float64 product; want16: the float64 product of the operands rounded to bf16,
  // which bf16 tensor cores compute exactly up to fp32 sums.
  auto product = [&](auto&& round) {
    std::vector<double> p(n * n, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < n; ++j)
          p[i * n + j] += double(round(a[i * n + k])) * round(b[k * n + j]);
    return p;
  };
  const std::vector<double> want = product([](float f) { return f; });
  const std::vector<double> want16 = product(round_bf16);
  const Tensor ta = Tensor::from_vector(a, {n, n}, dev);
  const Tensor tb = Tensor::from_vector(b, {n, n}, dev);
  auto max_err = [&](const std::vector<float>& got, const std::vector<double>& ref) {
    double e = 0.0;
    for (int64_t i = 0; i < n * n; ++i) e = std::max(e, std::abs(got[i] - ref[i]));
    return e;
  };
  EXPECT_EQ(device_setting(dev, "precision"), "fp32");
  auto product_at = [&](const char* precision) {
    set_device_setting(dev, "precision", precision);
    std::vector<float> got = matmul(ta, tb).to_vector<float>();
    EXPECT_EQ(device_setting(dev, "precision"), precision);
    return got;
  };
  const std::vector<float> got16 = product_at("bf16");
  const double tf32 = max_err(product_at("tf32"), want), fp32 = max_err(product_at("fp32"), want);
  const double bf16 = max_err(got16, want), bf16_rounded = max_err(got16, want16);
  EXPECT_LT(fp32, 1e-3);
  EXPECT_GT(tf32, fp32 * 4);  // 10 mantissa bits instead of 23
  EXPECT_LT(tf32, 0.2);
  EXPECT_GT(bf16, tf32 * 2);  // 7 mantissa bits
  EXPECT_LT(bf16, 1.0);
  EXPECT_LT(bf16_rounded, 1e-3);  // the CPU's rounding, then fp32 sums
  EXPECT_THROW(set_device_setting(dev, "precision", "fp16"), Error);
  EXPECT_THROW(set_device_setting(dev, "tf32", "1"), Error);
  EXPECT_EQ(device_setting(dev, "precision"), "fp32");
  std::printf(
      "256^3 product, max |error| vs float64: fp32 %.3g, tf32 %.3g, bf16 %.3g (%.3g against the "
      "product of the bf16-rounded operands)\n",
      fp32, tf32, bf16, bf16_rounded);
}

std::vector<float> wave(int64_t n, float f, float shift) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(f * static_cast<float>(i) + shift);
  return v;
}

TEST(CudaPrecisionOnGpu, Bf16ProductsOfEveryLayoutMatchTheRoundedOperandsProduct) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const Device gpu("cuda", 0);
  struct Case {
    const char* what;
    Shape a, b;
    MatmulSpec spec;
    bool bias;
  };
  MatmulSpec ta, tb, rows, gelu;
  ta.trans_a = true;
  tb.trans_b = true;
  rows.b_rows = 21;  // K = 21 of b's 40 stored rows
  gelu.trans_b = true;
  gelu.gelu = true;
  const std::vector<Case> cases = {
      {"[37, 50] x [50, 71] + bias", {37, 50}, {50, 71}, {}, true},
      {"trans_a [50, 37] x [50, 71]", {50, 37}, {50, 71}, ta, false},
      {"[37, 50] x trans_b [71, 50], gelu", {37, 50}, {71, 50}, gelu, true},
      {"trans_b [37, 50] x [71, 50]", {37, 50}, {71, 50}, tb, false},
      {"batched [3, 19, 13] x [3, 13, 29]", {3, 19, 13}, {3, 13, 29}, {}, false},
      {"batched with one b [3, 19, 13] x [13, 29]", {3, 19, 13}, {13, 29}, {}, false},
      {"b_rows 21 of [2, 40, 12]", {2, 9, 21}, {2, 40, 12}, rows, false},
  };
  int seed = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int64_t na = c.a.numel(), nb = c.b.numel(),
                  N = c.spec.trans_b ? c.b.dim(-2) : c.b.dim(-1);
    std::vector<float> a = wave(na, 0.37f, static_cast<float>(++seed));
    std::vector<float> b = wave(nb, 0.11f, static_cast<float>(++seed));
    std::vector<float> bias = wave(N, 0.5f, 0.0f);
    std::vector<float> a16(a), b16(b);
    for (float& x : a16) x = round_bf16(x);
    for (float& x : b16) x = round_bf16(x);
    const Tensor want = matmul(Tensor::from_vector(a16, c.a), Tensor::from_vector(b16, c.b), c.spec,
                               c.bias ? Tensor::from_vector(bias, {N}) : Tensor());
    ScopedPrecision bf16(gpu, "bf16");
    const Tensor got = matmul(Tensor::from_vector(a, c.a, gpu), Tensor::from_vector(b, c.b, gpu),
                              c.spec, c.bias ? Tensor::from_vector(bias, {N}, gpu) : Tensor());
    ASSERT_EQ(got.shape(), want.shape());
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    double err = 0.0;
    for (size_t i = 0; i < g.size(); ++i) err = std::max(err, std::abs(double(g[i]) - w[i]));
    EXPECT_LT(err, 1e-4);
  }
}

TEST(CudaPrecisionOnGpu, Bf16TrainingFollowsFp32AndResumesBitIdentically) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const Device gpu("cuda", 0);
  const train::Hyper h = test::two_micro_batch_hyper();
  const gpt2::Config cfg = test::tiny_config();
  auto losses_at = [&](const char* precision) {
    ScopedPrecision p(gpu, precision);
    gpt2::Model m = gpt2::Model::random(cfg, 5, gpu);
    train::Trainer t(m, h);
    std::vector<double> losses;
    for (int s = 0; s < 6; ++s) losses.push_back(t.step(test::two_micro_batches(s)).loss);
    for (const ag::Parameter& param : t.params())
      EXPECT_EQ(param.value().dtype(), DType::F32) << param.name();
    return losses;
  };
  const std::vector<double> fp32 = losses_at("fp32"), bf16 = losses_at("bf16");
  bool differs = false;
  for (size_t s = 0; s < fp32.size(); ++s) {
    EXPECT_NEAR(bf16[s], fp32[s], 0.02 * fp32[s]) << "step " << s;
    differs = differs || bf16[s] != fp32[s];
    std::printf("step %zu: loss fp32 %.6f, bf16 %.6f\n", s, fp32[s], bf16[s]);
  }
  EXPECT_TRUE(differs) << "bf16 gave fp32's bits: its products did not run in bf16";
  EXPECT_LT(bf16.back(), bf16.front());  // it learns

  // 4 steps straight through against 2, a save, a new trainer that loads, 2 more.
  ScopedPrecision p(gpu, "bf16");
  const std::string dir = test::temp_dir("cuda_bf16");
  gpt2::Model straight = gpt2::Model::random(cfg, 5, gpu);
  gpt2::Model first = gpt2::Model::random(cfg, 5, gpu);
  gpt2::Model resumed = gpt2::Model::random(cfg, 7, gpu);  // loading replaces every weight
  train::Trainer ts(straight, h), tf(first, h), tr(resumed, h);
  std::vector<double> want;
  for (int s = 0; s < 4; ++s) want.push_back(ts.step(test::two_micro_batches(s)).loss);
  for (int s = 0; s < 2; ++s)
    EXPECT_EQ(tf.step(test::two_micro_batches(s)).loss, want[s]) << "step " << s;
  tf.save_state(dir + "/state.safetensors", {});
  tr.load_state(dir + "/state.safetensors");
  for (int s = 2; s < 4; ++s)
    EXPECT_EQ(tr.step(test::two_micro_batches(s)).loss, want[s]) << "step " << s;
  test::expect_same_weights(ts, tr);
}

// Relative errors of got against want: the largest over want's largest, and the sum's over
// want's absolute sum.
struct RelErr {
  double worst = 0.0, mean = 0.0;
};
RelErr rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0.0, largest = 0.0, err = 0.0, sum = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]);
    worst = std::max(worst, e);
    largest = std::max(largest, std::abs(double(want[i])));
    err += e;
    sum += std::abs(double(want[i]));
  }
  EXPECT_EQ(got.size(), want.size());
  EXPECT_GT(largest, 0.1);  // real values, not zeros on both sides
  return {worst / largest, err / sum};
}

// Under precision bf16 (or tf32 with FORGE_CUDA_TC_ATTENTION=1) the 64-row attention tiles'
// products run on tensor cores with that precision's operands (the _bf16 and _tf32 kernels):
// forward (with split keys after a cache too) and gradient are the CPU's within the operands'
// rounding, not the fp32 kernels' bits, and the same bits when run again. `worst` and `mean` bound
// the relative errors (rel_err); `floor` is the least mean error that shows the operands were
// rounded (fp32 gives ~1e-7).
struct TcAttentionCase {
  const char* precision;
  const char* suffix;
  double worst, mean, floor;
};
void expect_tc_attention(const TcAttentionCase& k) {
  const Device dev("cuda", 0), cpu("cpu", 0);
  const int64_t B = 2, T = 200, H = 3, C = H * 64;
  auto expect_close = [&](const std::vector<float>& got, const std::vector<float>& want,
                          const std::vector<float>& fp32) {
    const RelErr e = rel_err(got, want);
    EXPECT_LT(e.worst, k.worst);
    EXPECT_LT(e.mean, k.mean);   // the typical element: a few roundings
    EXPECT_GT(e.mean, k.floor);  // operands really rounded
    EXPECT_NE(got, fp32);
    std::printf("  %s: worst %.3g, mean %.3g\n", k.precision, e.worst, e.mean);
  };
  const Tensor qkv_c =
      Tensor::from_vector(sin_fill(B * T * 3 * C, 0.37f, 0.1f), {B, T, 3 * C}, cpu);
  const Tensor dy_c = Tensor::from_vector(sin_fill(B * T * C, 0.053f, -0.2f), {B, T, C}, cpu);
  const Tensor y_c = attention(qkv_c, H);
  const std::vector<float> w = attention_bwd(qkv_c, y_c, dy_c, H).to_vector<float>();
  const Tensor qkv = qkv_c.to(dev), dy = dy_c.to(dev);
  const Tensor y = attention(qkv, H);
  const std::vector<float> g32 = attention_bwd(qkv, y, dy, H).to_vector<float>();
  // A prefill of 300 queries after 37 cached keys, in chunks of 2 key tiles.
  const int64_t start = 37, T2 = 300;
  const Tensor q2_c = Tensor::from_vector(sin_fill(T2 * 3 * C, 0.23f, 0.0f), {1, T2, 3 * C}, cpu);
  auto cached = [&](const Tensor& q, Device d) {
    Tensor kc =
        Tensor::from_vector(sin_fill(H * (start + T2) * 64, 0.029f, 0.0f), {H, start + T2, 64}, d);
    Tensor vc =
        Tensor::from_vector(sin_fill(H * (start + T2) * 64, 0.031f, 0.5f), {H, start + T2, 64}, d);
    setenv("FORGE_CUDA_ATTENTION_CHUNK_TILES", "2", 1);
    const std::vector<float> r = attention(q, H, kc, vc, start).to_vector<float>();
    unsetenv("FORGE_CUDA_ATTENTION_CHUNK_TILES");
    return r;
  };
  const Tensor q2 = q2_c.to(dev);
  const std::vector<float> c_want = cached(q2_c, cpu), c32 = cached(q2, dev);

  setenv("FORGE_CUDA_TC_ATTENTION", "1", 1);
  std::optional<ScopedPrecision> reduced(std::in_place, dev, k.precision);
  set_profiling(dev, true);
  const Tensor yr = attention(qkv, H);
  const std::vector<float> g = attention_bwd(qkv, y, dy, H).to_vector<float>();
  const auto launches = launches_by_kernel(dev);
  set_profiling(dev, false);
  const std::vector<float> again = attention_bwd(qkv, y, dy, H).to_vector<float>();
  const std::vector<float> cr = cached(q2, dev), cr_again = cached(q2, dev);
  reduced.reset();
  unsetenv("FORGE_CUDA_TC_ATTENTION");
  const std::string sfx = k.suffix;
  EXPECT_EQ(launches, (std::map<std::string, uint64_t>{{"forge_attention_bwd_dkv" + sfx, 1},
                                                       {"forge_attention_bwd_dq" + sfx, 1},
                                                       {"forge_attention_tiled64" + sfx, 1}}));
  {
    SCOPED_TRACE("forward");
    expect_close(yr.to_vector<float>(), y_c.to_vector<float>(), y.to_vector<float>());
  }
  {
    SCOPED_TRACE("forward after a cache, split keys");
    expect_close(cr, c_want, c32);
    EXPECT_EQ(cr_again, cr);
  }
  {
    SCOPED_TRACE("gradient");
    expect_close(g, w, g32);
    EXPECT_EQ(again, g);
  }
}

// bf16: 2^-9 relative per operand.
TEST(CudaPrecisionOnGpu, Bf16AttentionIsTheCpusWithinBf16Rounding) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  expect_tc_attention({"bf16", "_bf16", 3e-2, 1e-2, 1e-5});
}

// tf32: 2^-11 relative per operand, a quarter of bf16's bounds.
TEST(CudaPrecisionOnGpu, Tf32AttentionIsTheCpusWithinTf32Rounding) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  expect_tc_attention({"tf32", "_tf32", 7.5e-3, 2.5e-3, 2e-6});
}

// Large products whose fp32 rows are not 16-byte aligned (1025 columns) go through padded
// copies (forge_copy_rows) under tf32, not fp32: such an operand a, used as is or transposed,
// an out, and an accumulated out. The results are the CPU's within the precision's rounding,
// with the copies (FORGE_CUDA_PAD_ROWS=1) and without them (=0, the default).
TEST(CudaPrecisionOnGpu, UnalignedRowsGoThroughPaddedCopies) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const Device dev("cuda", 0), cpu("cpu", 0);
  const int64_t R = 1024, V = 1025, C = 64;  // R * V >= 2^20: large enough to pad
  const Tensor wide = Tensor::from_vector(sin_fill(R * V, 0.013f, 0.0f), {R, V}, cpu);
  const Tensor tall = Tensor::from_vector(sin_fill(V * C, 0.021f, 0.0f), {V, C}, cpu);
  const Tensor h = Tensor::from_vector(sin_fill(R * C, 0.017f, 0.1f), {R, C}, cpu);
  const Tensor hv = Tensor::from_vector(sin_fill(C * V, 0.019f, 0.0f), {C, V}, cpu);
  MatmulSpec ta;
  ta.trans_a = true;
  auto products = [&](Device d) {
    std::vector<std::vector<float>> r;
    r.push_back(matmul(wide.to(d), tall.to(d)).to_vector<float>());   // a [R, V]
    r.push_back(matmul(wide.to(d), h.to(d), ta).to_vector<float>());  // a [R, V] used as [V, R]
    Tensor out = matmul(h.to(d), hv.to(d));                           // out [R, V]
    r.push_back(out.to_vector<float>());
    matmul_add_(out, h.to(d), hv.to(d));  // out [R, V] += the same: twice the product
    r.push_back(out.to_vector<float>());
    return r;
  };
  const auto want = products(cpu);
  for (const char* precision : {"fp32", "tf32"}) {
    const ScopedPrecision p(dev, precision);
    const double tol = std::string(precision) == "fp32" ? 1e-5 : 5e-3;
    for (const char* pad : {"1", "0"}) {
      SCOPED_TRACE(std::string(precision) + ", FORGE_CUDA_PAD_ROWS=" + pad);
      setenv("FORGE_CUDA_PAD_ROWS", pad, 1);
      set_profiling(dev, true);
      const auto got = products(dev);
      const auto launches = launches_by_kernel(dev);
      set_profiling(dev, false);
      unsetenv("FORGE_CUDA_PAD_ROWS");
      const auto copies = launches.find("forge_copy_rows");
      const bool pads = pad[0] == '1' && std::string(precision) == "tf32";
      EXPECT_EQ(copies == launches.end() ? 0u : copies->second, pads ? 5u : 0u);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(rel_err(got[i], want[i]).worst, tol) << i;
    }
  }
}

}  // namespace
