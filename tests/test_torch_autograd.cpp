// One full forward + backward of a 1-layer GPT-2-like model through forge::ag, against the
// same model written by hand in float64 PyTorch (tests/python/autograd_check.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/forge.h"
#include "pyref.h"

using namespace forge;

namespace {

constexpr int64_t kB = 2, kT = 7, kC = 16, kHeads = 2, kV = 23, kP = 9;
constexpr float kEps = 1e-5f;

struct Weights {
  std::map<std::string, ag::Parameter> p;  // ordered by name
  std::vector<ag::Parameter> list() const {
    std::vector<ag::Parameter> out;
    for (const auto& [name, param] : p) out.push_back(param);
    return out;
  }
};

/// Random weights large enough that every gradient is well away from zero: N(0, std),
/// plus `mean` (1 for LayerNorm gains).
Weights make_weights(uint32_t seed) {
  std::mt19937 rng(seed);
  Weights w;
  auto add = [&](const std::string& name, Shape shape, float std, float mean = 0.0f) {
    std::normal_distribution<float> dist(mean, std);
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    for (float& x : v) x = dist(rng);
    w.p.emplace(name, ag::Parameter(Tensor::from_vector(v, shape), name));
  };
  add("wte", {kV, kC}, 0.3f);
  add("wpe", {kP, kC}, 0.1f);
  add("ln_1.w", {kC}, 0.1f, 1.0f);
  add("ln_1.b", {kC}, 0.1f);
  add("attn.w", {kC, 3 * kC}, 0.3f);
  add("attn.b", {3 * kC}, 0.1f);
  add("proj.w", {kC, kC}, 0.2f);
  add("proj.b", {kC}, 0.1f);
  add("ln_2.w", {kC}, 0.1f, 1.0f);
  add("ln_2.b", {kC}, 0.1f);
  add("fc.w", {kC, 4 * kC}, 0.2f);
  add("fc.b", {4 * kC}, 0.1f);
  add("fc2.w", {4 * kC, kC}, 0.2f);
  add("fc2.b", {kC}, 0.1f);
  add("ln_f.w", {kC}, 0.1f, 1.0f);
  add("ln_f.b", {kC}, 0.1f);
  return w;
}

/// The forward pass through autograd. Returns the loss Var.
ag::Var forward(ag::Tape& tape, const Weights& w, const Tensor& ids, const Tensor& pos,
                const Tensor& targets) {
  auto P = [&](const char* name) { return tape.param(w.p.at(name)); };
  const ag::Var wte = P("wte");

  // x: [B, T, C] = wte[ids] + wpe[t]
  ag::Var x = ag::add(ag::embedding(ids, wte), ag::embedding(pos, P("wpe")));

  ag::Var h = ag::layernorm(x, P("ln_1.w"), P("ln_1.b"), kEps);
  ag::Var qkv = ag::matmul(h, P("attn.w"), {}, P("attn.b"));  // [B, T, 3C]
  auto [q, k, v] = ag::split_qkv(qkv, kHeads);                // [B*nh, T, hd] each
  MatmulSpec qk;
  qk.trans_b = true;
  qk.alpha = 1.0f / std::sqrt(static_cast<float>(kC / kHeads));
  ag::Var att = ag::softmax(ag::matmul(q, k, qk), /*causal=*/true);  // [B*nh, T, T]
  ag::Var y = ag::merge_heads(ag::matmul(att, v), kHeads);           // [B, T, C]
  x = ag::add(x, ag::matmul(y, P("proj.w"), {}, P("proj.b")));

  h = ag::layernorm(x, P("ln_2.w"), P("ln_2.b"), kEps);
  h = ag::gelu(ag::matmul(h, P("fc.w"), {}, P("fc.b")));  // [B, T, 4C]
  x = ag::add(x, ag::matmul(h, P("fc2.w"), {}, P("fc2.b")));

  x = ag::layernorm(x, P("ln_f.w"), P("ln_f.b"), kEps);
  MatmulSpec head;
  head.trans_b = true;
  ag::Var logits = ag::matmul(x, wte, head);  // [B, T, V], tied to wte
  return ag::cross_entropy(logits, targets);
}

}  // namespace

TEST(TorchAutograd, GptBlockLossAndGradsMatchFloat64) {
  FORGE_REQUIRE_TORCH();
  const Weights w = make_weights(1234);

  std::mt19937 rng(99);
  std::vector<uint32_t> ids(kB * kT), targets(kB * kT), pos(kB * kT);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<uint32_t>(rng() % kV);
    targets[i] = static_cast<uint32_t>(rng() % kV);
    pos[i] = static_cast<uint32_t>(i % kT);
  }
  ids[1] = ids[4] = ids[9];  // repeated tokens: the embedding gradient must accumulate
  const Tensor ids_t = Tensor::from_vector(ids, {kB, kT});
  const Tensor pos_t = Tensor::from_vector(pos, {kB, kT});
  const Tensor tgt_t = Tensor::from_vector(targets, {kB, kT});

  nlohmann::json in;
  in["config"] = {{"n_head", kHeads}, {"eps", kEps}};
  in["ids"] = nlohmann::json::array();
  in["targets"] = nlohmann::json::array();
  for (int64_t b = 0; b < kB; ++b) {
    in["ids"].push_back(std::vector<uint32_t>(ids.begin() + b * kT, ids.begin() + (b + 1) * kT));
    in["targets"].push_back(
        std::vector<uint32_t>(targets.begin() + b * kT, targets.begin() + (b + 1) * kT));
  }
  for (const auto& [name, p] : w.p)
    in["params"][name] = {{"shape", p.value().shape().dims()},
                          {"data", p.value().to_vector<float>()}};
  const nlohmann::json ref = test::run_python("autograd_check.py", in);
  const double ref_loss = ref["loss"].get<double>();

  ag::Tape tape;
  ag::Var loss = forward(tape, w, ids_t, pos_t, tgt_t);
  ASSERT_EQ(loss.shape(), Shape({1}));
  const double got_loss = loss.value().to_vector<float>()[0];
  EXPECT_NEAR(got_loss, ref_loss, 1e-5 * std::abs(ref_loss));
  tape.backward(loss);
  EXPECT_EQ(tape.num_records(), 0u);

  for (const auto& [name, p] : w.p) {
    SCOPED_TRACE(name);
    const std::vector<double> want = ref["grads"][name].get<std::vector<double>>();
    ASSERT_TRUE(p.has_grad());
    const std::vector<float> got = p.grad().to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    double max_abs = 0;
    for (double x : want) max_abs = std::max(max_abs, std::abs(x));
    ASSERT_GT(max_abs, 1e-4) << "reference gradient is degenerate";
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * max_abs) << "element " << i;
  }
}
