// A few ops cross-checked against PyTorch (Debian's python3-torch, float64), a reference
// written by other people than the float64 loops of reference.cpp: matmul with transposes,
// causal softmax, layernorm, tanh GELU, gather_nll/ce_bwd vs F.cross_entropy, layernorm
// backward via autograd, adamw vs torch.optim.AdamW over 3 steps, and the dropout mask vs a
// pure-Python re-implementation of the hash.
//
// All tasks go to tests/python/ops_check.py in one run (importing torch costs ~2 s); inputs
// are float32 values sent as exact doubles, so torch sees exactly what forge sees.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "op_cases.h"
#include "pyref.h"

namespace forge::test {
namespace {

using nlohmann::json;

std::vector<float> floats(const json& j) { return j.get<std::vector<float>>(); }
std::vector<double> doubles(const json& j) { return j.get<std::vector<double>>(); }

json matmul_task(CaseRng& r, bool ta, bool tb, std::vector<int64_t> a_shape,
                 std::vector<int64_t> b_shape, float alpha, bool bias, int64_t n) {
  json t;
  t["op"] = "matmul";
  t["trans_a"] = ta;
  t["trans_b"] = tb;
  t["alpha"] = alpha;
  t["a_shape"] = a_shape;
  t["b_shape"] = b_shape;
  t["a"] = r.floats(static_cast<size_t>(Shape(a_shape).numel()));
  t["b"] = r.floats(static_cast<size_t>(Shape(b_shape).numel()));
  t["bias"] = bias ? json(r.floats(static_cast<size_t>(n))) : json(nullptr);
  return t;
}

/// Every task, deterministic: tests rebuild their forge inputs from these same values.
const json& tasks() {
  static const json all = [] {
    CaseRng r("torch_ops");
    json t;
    // M = 7, K = 33, N = 5; each transpose combination with a different batch layout.
    t["matmul_00"] = matmul_task(r, false, false, {7, 33}, {33, 5}, 1.0f, true, 5);
    t["matmul_01"] = matmul_task(r, false, true, {2, 7, 33}, {2, 5, 33}, 0.125f, false, 5);
    t["matmul_10"] = matmul_task(r, true, false, {3, 33, 7}, {33, 5}, 1.0f, true, 5);
    t["matmul_11"] = matmul_task(r, true, true, {33, 7}, {4, 5, 33}, -2.0f, true, 5);
    struct SoftmaxTask {
      const char* name;
      std::vector<int64_t> shape;
      int64_t offset;
    };
    for (const SoftmaxTask& st : {SoftmaxTask{"softmax_prefill", {3, 6, 6}, 0},
                                  SoftmaxTask{"softmax_offset", {2, 5, 9}, 4}}) {
      json& s = t[st.name];
      s["op"] = "softmax_causal";
      s["shape"] = st.shape;
      s["offset"] = st.offset;
      s["x"] = r.floats(static_cast<size_t>(Shape(st.shape).numel()));
    }
    json& ln = t["layernorm"];
    ln["op"] = "layernorm";
    ln["shape"] = {5, 33};
    ln["eps"] = 1e-5f;
    ln["x"] = r.floats(5 * 33);
    ln["gamma"] = r.floats(33);
    ln["beta"] = r.floats(33);
    json& g = t["gelu"];
    g["op"] = "gelu";
    g["x"] = r.floats(257, -6.0f, 6.0f);
    json& ce = t["cross_entropy"];
    ce["op"] = "cross_entropy";
    ce["shape"] = {6, 33};
    ce["logits"] = r.floats(6 * 33, -4.0f, 4.0f);
    ce["targets"] = std::vector<uint32_t>{0, 32, 7, 7, 16, 1};
    ce["scale"] = 0.25f;
    json& lb = t["layernorm_backward"];
    lb["op"] = "layernorm_backward";
    lb["shape"] = {3, 17};
    lb["eps"] = 1e-5f;
    lb["x"] = r.floats(3 * 17);
    lb["gamma"] = r.floats(17);
    lb["beta"] = r.floats(17);
    lb["dy"] = r.floats(3 * 17);
    json& ad = t["adamw"];
    ad["op"] = "adamw";
    ad["lr"] = 1e-2f;
    ad["beta1"] = 0.9f;
    ad["beta2"] = 0.999f;
    ad["eps"] = 1e-8f;
    ad["weight_decay"] = 0.1f;
    ad["param"] = r.floats(50);
    ad["grads"] = {r.floats(50), r.floats(50), r.floats(50)};
    json& dr = t["dropout"];
    dr["op"] = "dropout";
    dr["seed"] = 0xDEADBEEF12345678ull;
    dr["p"] = 0.3f;
    dr["n"] = 4099;
    json queries = json::array();
    for (uint64_t seed : {uint64_t{0}, uint64_t{7}, uint64_t{0xFFFFFFFFFFFFFFFFull}})
      for (uint64_t index : {uint64_t{0}, uint64_t{1}, uint64_t{0xFFFFFFFFull},
                             uint64_t{0x100000000ull}, uint64_t{0x123456789ABCull}})
        queries.push_back({seed, index});
    dr["hash_queries"] = queries;
    return json{{"tasks", t}};
  }();
  return all["tasks"];
}

const json& results() {
  static const json out = run_python("ops_check.py", json{{"tasks", tasks()}});
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: forge " << got[i] << ", torch " << want[i]
                    << " (tolerance " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(TorchOps, MatmulTransposeFlags) {
  FORGE_REQUIRE_TORCH();
  for (const char* name : {"matmul_00", "matmul_01", "matmul_10", "matmul_11"}) {
    const json& t = tasks()[name];
    const auto as = t["a_shape"].get<std::vector<int64_t>>();
    const auto bs = t["b_shape"].get<std::vector<int64_t>>();
    MatmulSpec spec;
    spec.trans_a = t["trans_a"];
    spec.trans_b = t["trans_b"];
    spec.alpha = t["alpha"];
    const Tensor bias =
        t["bias"].is_null() ? Tensor() : Tensor::from_vector(floats(t["bias"]), {5});
    const Tensor out = matmul(Tensor::from_vector(floats(t["a"]), Shape(as)),
                              Tensor::from_vector(floats(t["b"]), Shape(bs)), spec, bias);
    // K = 33 products of |a|, |b| <= 2, |alpha| <= 2: sum|terms| <= 33 * 4 * 2 + 2.
    expect_close(out.to_vector<float>(), doubles(results()[name]["out"]),
                 reduction_tol(1e-4, 33 * 4 * 2 + 2), name);
  }
}

TEST(TorchOps, CausalSoftmax) {
  FORGE_REQUIRE_TORCH();
  for (const char* name : {"softmax_prefill", "softmax_offset"}) {
    const json& t = tasks()[name];
    const Tensor x =
        Tensor::from_vector(floats(t["x"]), Shape(t["shape"].get<std::vector<int64_t>>()));
    const std::vector<float> got = softmax(x, true, t["offset"]).to_vector<float>();
    const std::vector<double> want = doubles(results()[name]["out"]);
    expect_close(got, want, 1e-4, name);
    for (size_t i = 0; i < got.size(); ++i)
      if (want[i] == 0.0) {
        EXPECT_EQ(got[i], 0.0f) << name << ": masked entry " << i;
      }
  }
}

TEST(TorchOps, LayerNorm) {
  FORGE_REQUIRE_TORCH();
  const json& t = tasks()["layernorm"];
  const Tensor y = layernorm(Tensor::from_vector(floats(t["x"]), {5, 33}),
                             Tensor::from_vector(floats(t["gamma"]), {33}),
                             Tensor::from_vector(floats(t["beta"]), {33}), t["eps"]);
  expect_close(y.to_vector<float>(), doubles(results()["layernorm"]["out"]), 1e-4, "layernorm");
}

TEST(TorchOps, GeluTanh) {
  FORGE_REQUIRE_TORCH();
  const json& t = tasks()["gelu"];
  const Tensor y = gelu(Tensor::from_vector(floats(t["x"]), {257}));
  expect_close(y.to_vector<float>(), doubles(results()["gelu"]["out"]), 1e-4, "gelu");
}

TEST(TorchOps, GatherNllAndCeBwdMatchCrossEntropy) {
  FORGE_REQUIRE_TORCH();
  const json& t = tasks()["cross_entropy"];
  const Tensor logits = Tensor::from_vector(floats(t["logits"]), {6, 33});
  const Tensor targets = Tensor::from_vector(t["targets"].get<std::vector<uint32_t>>(), {6});
  const json& r = results()["cross_entropy"];
  expect_close(gather_nll(logits, targets).to_vector<float>(), doubles(r["nll"]), 1e-4,
               "gather_nll");
  // Gradient entries are probabilities * 0.25, ~1e-2: 1e-6 is still 1e-4 relative.
  expect_close(ce_bwd(logits, targets, t["scale"]).to_vector<float>(), doubles(r["grad"]), 1e-6,
               "ce_bwd");
}

TEST(TorchOps, LayerNormBackwardMatchesAutograd) {
  FORGE_REQUIRE_TORCH();
  const json& t = tasks()["layernorm_backward"];
  const LayerNormGrads g = layernorm_bwd(Tensor::from_vector(floats(t["x"]), {3, 17}),
                                         Tensor::from_vector(floats(t["gamma"]), {17}),
                                         Tensor::from_vector(floats(t["dy"]), {3, 17}), t["eps"]);
  const json& r = results()["layernorm_backward"];
  expect_close(g.dx.to_vector<float>(), doubles(r["dx"]), 1e-3, "dx");
  expect_close(g.dgamma.to_vector<float>(), doubles(r["dgamma"]), 1e-4, "dgamma");
  expect_close(g.dbeta.to_vector<float>(), doubles(r["dbeta"]), 1e-4, "dbeta");
}

TEST(TorchOps, AdamWMatchesTorchOptimOverThreeSteps) {
  FORGE_REQUIRE_TORCH();
  const json& t = tasks()["adamw"];
  Tensor param = Tensor::from_vector(floats(t["param"]), {50});
  Tensor m = Tensor::zeros({50}), v = Tensor::zeros({50});
  AdamWParams p;
  p.lr = t["lr"];
  p.beta1 = t["beta1"];
  p.beta2 = t["beta2"];
  p.eps = t["eps"];
  p.weight_decay = t["weight_decay"];
  for (int s = 0; s < 3; ++s) {
    p.step = s + 1;
    adamw(param, Tensor::from_vector(floats(t["grads"][static_cast<size_t>(s)]), {50}), m, v, p);
  }
  const json& r = results()["adamw"];
  // Each step moves a parameter by ~lr = 1e-2; 1e-5 is a thousandth of one step.
  expect_close(param.to_vector<float>(), doubles(r["param"]), 1e-5, "param");
  expect_close(m.to_vector<float>(), doubles(r["m"]), 1e-5, "exp_avg");
  expect_close(v.to_vector<float>(), doubles(r["v"]), 1e-5, "exp_avg_sq");
}

TEST(TorchOps, DropoutMaskMatchesPythonHash) {
  FORGE_REQUIRE_TORCH();  // the script imports torch, although this part does not use it
  const json& t = tasks()["dropout"];
  const json& r = results()["dropout"];
  const int64_t n = t["n"];
  const float p = t["p"];
  const uint64_t seed = t["seed"];
  const Tensor ones = Tensor::full({n}, 1.0f);
  const std::vector<float> y = dropout(ones, p, seed).to_vector<float>();
  const auto keep = r["keep"].get<std::vector<int>>();
  ASSERT_EQ(keep.size(), y.size());
  const float scale = 1.0f / (1.0f - p);
  int64_t wrong = 0, kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    wrong += y[i] != (keep[i] ? scale : 0.0f);
    kept += keep[i];
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, n);
  const json& queries = t["hash_queries"];
  const auto hashes = r["hashes"].get<std::vector<uint32_t>>();
  ASSERT_EQ(hashes.size(), queries.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint64_t s = queries[i][0], index = queries[i][1];
    EXPECT_EQ(dropout_hash(s, index), hashes[i]) << "seed " << s << " index " << index;
  }
}

}  // namespace
}  // namespace forge::test
