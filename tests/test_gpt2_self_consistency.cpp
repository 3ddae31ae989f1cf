// GPT-2's self-consistency, without Python: KV-cache decode against the full forward at every
// step, batched prefill and decode against single runs, and random init as GPT-2 initializes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/gpt2.h"
#include "gpt2_test_util.h"

using namespace forge;
using namespace forge::gpt2;
using namespace forge::test::gpt2_tests;

namespace {
/// Random init has tiny weights (std 0.02), which would make every comparison easy to
/// pass; scale all weights up so that logits and attention patterns are O(1).
Model lively_model(const Config& c, uint64_t seed) {
  Model m = Model::random(c, seed);
  auto grow = [](Tensor& t, float s) { scale_(t, s); };
  Weights& w = m.weights();
  grow(w.wte, 15.0f);
  grow(w.wpe, 15.0f);
  for (LayerWeights& L : w.layers)
    for (Tensor* t : {&L.attn_w, &L.attn_proj_w, &L.fc_w, &L.fc_proj_w}) grow(*t, 12.0f);
  return m;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
  return d;
}
}  // namespace

TEST(Gpt2, KvCacheDecodeMatchesFullForwardEveryStep) {
  const Model m = lively_model(odd_config(), 3);
  const int64_t V = m.config().vocab_size;
  const std::vector<uint32_t> seq = random_ids(40, V, 11);
  const std::vector<float> full = m.forward(ids_tensor({seq})).to_vector<float>();  // [40, V]
  double scale = 1.0;
  for (float v : full) scale = std::max(scale, static_cast<double>(std::abs(v)));
  KVCache cache(m, 1);
  // Prefill 9 tokens (all logits), then decode one token at a time up to n_ctx.
  const std::vector<uint32_t> prompt(seq.begin(), seq.begin() + 9);
  const std::vector<float> pre =
      m.forward_cached(ids_tensor({prompt}), cache, true).to_vector<float>();
  EXPECT_LE(max_abs_diff(pre, std::vector<float>(full.begin(), full.begin() + 9 * V)),
            1e-4 * scale);
  EXPECT_EQ(cache.length(), 9);
  for (int64_t t = 9; t < 40; ++t) {
    const Tensor step = m.forward_cached(u32({seq[t]}, {1, 1}), cache);
    ASSERT_EQ(step.shape(), Shape({1, V}));
    const std::vector<float> want(full.begin() + t * V, full.begin() + (t + 1) * V);
    EXPECT_LE(max_abs_diff(step.to_vector<float>(), want), 1e-4 * scale) << "step " << t;
  }
  EXPECT_EQ(cache.length(), 40);
  // The cache is full now; the next token overflows, and leaves the cache as it was.
  EXPECT_FORGE_ERROR(m.forward_cached(u32({1u}, {1, 1}), cache), ErrorKind::Range,
                     "gpt2::Model::forward_cached", "overflow");
  EXPECT_EQ(cache.length(), 40);
  // reset() reuses the buffers for a new sequence.
  const Tensor k0 = cache.k(0);
  cache.reset();
  const std::vector<float> again =
      m.forward_cached(ids_tensor({prompt}), cache, true).to_vector<float>();
  EXPECT_EQ(again, pre);
  EXPECT_EQ(cache.k(0).storage(), k0.storage());
}

TEST(Gpt2, BatchedPrefillAndDecodeEqualSingleRuns) {
  const Model m = lively_model(odd_config(), 4);
  const int64_t V = m.config().vocab_size;
  const std::vector<uint32_t> a = random_ids(13, V, 1), b = random_ids(13, V, 2);
  // Full forward, B = 2 vs 1.
  const std::vector<float> both = m.forward(ids_tensor({a, b})).to_vector<float>();
  const std::vector<float> fa = m.forward(ids_tensor({a})).to_vector<float>();
  const std::vector<float> fb = m.forward(ids_tensor({b})).to_vector<float>();
  std::vector<float> cat = fa;
  cat.insert(cat.end(), fb.begin(), fb.end());
  EXPECT_LE(max_abs_diff(both, cat), 1e-5);
  // Cached prefill + 5 decode steps, B = 2 vs two B = 1 caches.
  KVCache c2(m, 2), ca(m, 1), cb(m, 1);
  std::vector<float> l2 = m.forward_cached(ids_tensor({a, b}), c2).to_vector<float>();
  std::vector<float> la = m.forward_cached(ids_tensor({a}), ca).to_vector<float>();
  std::vector<float> lb = m.forward_cached(ids_tensor({b}), cb).to_vector<float>();
  for (int step = 0; step < 6; ++step) {
    ASSERT_EQ(l2.size(), static_cast<size_t>(2 * V));
    EXPECT_LE(max_abs_diff(std::vector<float>(l2.begin(), l2.begin() + V), la), 1e-5);
    EXPECT_LE(max_abs_diff(std::vector<float>(l2.begin() + V, l2.end()), lb), 1e-5);
    const uint32_t na = argmax(la.data(), V), nb = argmax(lb.data(), V);
    l2 = m.forward_cached(u32({na, nb}, {2, 1}), c2).to_vector<float>();
    la = m.forward_cached(u32({na}, {1, 1}), ca).to_vector<float>();
    lb = m.forward_cached(u32({nb}, {1, 1}), cb).to_vector<float>();
  }
}

TEST(Gpt2, RandomInitIsGpt2Init) {
  Config c = odd_config();
  c.n_layer = 8;
  const Model m = Model::random(c, 42);
  const Model m2 = Model::random(c, 42);
  const Model m3 = Model::random(c, 43);
  auto stats = [](const Tensor& t) {
    double s = 0, s2 = 0;
    for (float v : t.to_vector<float>()) s += v, s2 += double(v) * v;
    const double n = static_cast<double>(t.numel());
    return std::pair{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  const auto [wm, ws] = stats(m.weights().wte);
  EXPECT_NEAR(wm, 0.0, 0.001);
  EXPECT_NEAR(ws, 0.02, 0.0005);
  EXPECT_NEAR(stats(m.weights().layers[3].fc_proj_w).second, 0.02 / std::sqrt(16.0), 0.0003);
  EXPECT_NEAR(stats(m.weights().layers[3].attn_proj_w).second, 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_NEAR(stats(m.weights().layers[1].attn_w).second, 0.02, 0.0005);
  for (float v : m.weights().layers[0].ln_1_w.to_vector<float>()) EXPECT_EQ(v, 1.0f);
  for (float v : m.weights().layers[0].fc_b.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(m.weights().wpe.to_vector<float>(), m2.weights().wpe.to_vector<float>());
  EXPECT_NE(m.weights().wpe.to_vector<float>(), m3.weights().wpe.to_vector<float>());
  EXPECT_EQ(m.num_params(), c.num_params());
  // An untied config gets its own head, drawn like wte (but not equal to it).
  Config u = c;
  u.tie_word_embeddings = false;
  const Model mu = Model::random(u, 42);
  ASSERT_TRUE(mu.weights().lm_head.defined());
  EXPECT_NEAR(stats(mu.weights().lm_head).second, 0.02, 0.0005);
  EXPECT_NE(mu.weights().lm_head.to_vector<float>(), mu.weights().wte.to_vector<float>());
  EXPECT_EQ(mu.num_params(), c.num_params() + c.vocab_size * c.n_embd);
}
