// The fused attention op (forge::attention) against the unfused chain it replaces in the
// GPT-2 forward (split_heads, the cache rows, q k^T, causal softmax, p v, merge_heads), on every
// device, for GPT-2's head shape (12 heads of 64): a prefill from position 0, then decode
// steps over a cache, and a chunk of many tokens over a cache. The float64 comparison of many
// shapes is the op harness's (tests/op_cases.cpp); this checks that the two paths the model can
// take agree.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ci.h"
#include "forge/forge.h"

namespace forge::test {
namespace {

constexpr int64_t kHeads = 12, kHd = 64, kC = kHeads * kHd;

std::vector<float> wave(size_t n, float phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 0.61f + phase);
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

/// The unfused chain of gpt2::Model::run's attention block. Caches may be undefined.
Tensor unfused(const Tensor& qkv, Tensor kc, Tensor vc, int64_t pos) {
  const Tensor q = split_heads(qkv, kHeads, 0);  // [B*H, T, hd]
  Tensor k = split_heads(qkv, kHeads, 1);
  Tensor v = split_heads(qkv, kHeads, 2);
  const int64_t S = pos + qkv.dim(1);
  MatmulSpec qk{.trans_a = false,
                .trans_b = true,
                .alpha = 1.0f / std::sqrt(static_cast<float>(kHd)),
                .b_rows = 0};
  MatmulSpec pv{};
  if (kc.defined()) {
    // The new keys and values to rows pos.. of each group's cache.
    auto rows = [](const Tensor& t, int64_t g) {  // group g as [rows, hd]
      return t.narrow_rows(g, 1).reshape({t.dim(1), t.dim(2)});
    };
    for (int64_t g = 0; g < kc.dim(0); ++g) {
      rows(kc, g).narrow_rows(pos, k.dim(1)).copy_from(rows(k, g));
      rows(vc, g).narrow_rows(pos, v.dim(1)).copy_from(rows(v, g));
    }
    k = kc;
    v = vc;
    qk.b_rows = S;
    pv.b_rows = S;
  }
  const Tensor p = softmax(matmul(q, k, qk), true, pos);  // [B*H, T, S]
  return merge_heads(matmul(p, v, pv), kHeads);           // [B, T, C]
}

TEST(Attention, FusedEqualsTheUnfusedChainOnEveryDevice) {
  for (const DeviceInfo& info : list_devices()) {
    const Device dev = info.device;
    SCOPED_TRACE(dev.str());
    // Prefill of 70 tokens without a cache (two prefill tiles, the second partial).
    const Tensor qkv = Tensor::from_vector(wave(70 * 3 * kC, 0.3f), {1, 70, 3 * kC}, dev);
    EXPECT_LE(max_abs_diff(attention(qkv, kHeads).to_vector<float>(),
                           unfused(qkv, {}, {}, 0).to_vector<float>()),
              1e-5);
    // The same prefill into caches, then decode steps at positions 40.. of a second cache
    // pair filled the unfused way (a 41st token over 40 cached ones, and so on).
    constexpr int64_t cap = 80;
    Tensor kc_f = Tensor::zeros({kHeads, cap, kHd}, DType::F32, dev);
    Tensor vc_f = Tensor::zeros({kHeads, cap, kHd}, DType::F32, dev);
    Tensor kc_u = Tensor::zeros({kHeads, cap, kHd}, DType::F32, dev);
    Tensor vc_u = Tensor::zeros({kHeads, cap, kHd}, DType::F32, dev);
    const Tensor prompt = qkv.reshape({70, 3 * kC}).narrow_rows(0, 40).reshape({1, 40, 3 * kC});
    EXPECT_LE(max_abs_diff(attention(prompt, kHeads, kc_f, vc_f, 0).to_vector<float>(),
                           unfused(prompt, kc_u, vc_u, 0).to_vector<float>()),
              1e-5);
    for (int64_t pos = 40; pos < 43; ++pos) {
      SCOPED_TRACE("decode at pos " + std::to_string(pos));
      const Tensor step =
          Tensor::from_vector(wave(3 * kC, static_cast<float>(pos)), {1, 1, 3 * kC}, dev);
      EXPECT_LE(max_abs_diff(attention(step, kHeads, kc_f, vc_f, pos).to_vector<float>(),
                             unfused(step, kc_u, vc_u, pos).to_vector<float>()),
                1e-5);
    }
    // Both wrote the same rows, bit for bit, and nothing past them.
    EXPECT_EQ(kc_f.to_vector<float>(), kc_u.to_vector<float>());
    EXPECT_EQ(vc_f.to_vector<float>(), vc_u.to_vector<float>());
    // A chunk of 70 new tokens over 40 cached ones (a GPU's tiled prefill kernel at a
    // position past 0, its second tile partial).
    constexpr int64_t cap2 = 128;
    Tensor kc2_f = Tensor::zeros({kHeads, cap2, kHd}, DType::F32, dev);
    Tensor vc2_f = Tensor::zeros({kHeads, cap2, kHd}, DType::F32, dev);
    Tensor kc2_u = Tensor::zeros({kHeads, cap2, kHd}, DType::F32, dev);
    Tensor vc2_u = Tensor::zeros({kHeads, cap2, kHd}, DType::F32, dev);
    (void)attention(prompt, kHeads, kc2_f, vc2_f, 0);
    (void)unfused(prompt, kc2_u, vc2_u, 0);
    const Tensor chunk = Tensor::from_vector(wave(70 * 3 * kC, 1.7f), {1, 70, 3 * kC}, dev);
    EXPECT_LE(max_abs_diff(attention(chunk, kHeads, kc2_f, vc2_f, 40).to_vector<float>(),
                           unfused(chunk, kc2_u, vc2_u, 40).to_vector<float>()),
              1e-5);
    EXPECT_EQ(kc2_f.to_vector<float>(), kc2_u.to_vector<float>());
  }
}

// attention_at (the position in a tensor on the device) gives attention's results bit for
// bit, caches included, for decode steps and a few new tokens at once; on a GPU a position
// past cap - T is clamped to cap - T (the CPU refuses it: tests/test_ops_errors.cpp).
TEST(Attention, AtAPositionTensorEqualsAttentionBitForBit) {
  for (const DeviceInfo& info : list_devices()) {
    const Device dev = info.device;
    SCOPED_TRACE(dev.str());
    constexpr int64_t cap = 100;
    const std::vector<float> init = wave(kHeads * cap * kHd, 2.0f);
    auto cache = [&] { return Tensor::from_vector(init, {kHeads, cap, kHd}, dev); };
    for (const auto& [T, pos] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {1, 70}, {3, 97}}) {
      SCOPED_TRACE("T " + std::to_string(T) + ", pos " + std::to_string(pos));
      const Tensor qkv = Tensor::from_vector(wave(T * 3 * kC, 0.7f), {1, T, 3 * kC}, dev);
      Tensor kc = cache(), vc = cache(), kc_at = cache(), vc_at = cache();
      const Tensor p =
          Tensor::from_vector(std::vector<uint32_t>{static_cast<uint32_t>(pos)}, {1}, dev);
      EXPECT_EQ(attention_at(qkv, kHeads, kc_at, vc_at, p).to_vector<float>(),
                attention(qkv, kHeads, kc, vc, pos).to_vector<float>());
      EXPECT_EQ(kc_at.to_vector<float>(), kc.to_vector<float>());
      EXPECT_EQ(vc_at.to_vector<float>(), vc.to_vector<float>());
    }
    if (dev.is_cpu()) continue;
    const Tensor qkv = Tensor::from_vector(wave(2 * 3 * kC, 0.1f), {1, 2, 3 * kC}, dev);
    Tensor kc = cache(), vc = cache(), kc_at = cache(), vc_at = cache();
    const Tensor far = Tensor::from_vector(std::vector<uint32_t>{1000000}, {1}, dev);
    EXPECT_EQ(attention_at(qkv, kHeads, kc_at, vc_at, far).to_vector<float>(),
              attention(qkv, kHeads, kc, vc, cap - 2).to_vector<float>());
    EXPECT_EQ(kc_at.to_vector<float>(), kc.to_vector<float>());
  }
}

}  // namespace
}  // namespace forge::test
