// GPT-2 model tests: config parsing, loading (prefixes, dtypes, shards, tied/untied head),
// the forward pass against an independent float64 reference (tests/python/gpt2_reference.py),
// KV-cache decode vs full forward, batching, evaluation windows, save round
// trip, and every bad input we promise to reject.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ci.h"
#include "forge/forge.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"
#include "pyref.h"

using namespace forge;
using namespace forge::gpt2;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Runs `stmt`, expecting forge::Error of `kind` whose message starts with `prefix` and
// contains `needle`.
#define EXPECT_FORGE_ERROR(stmt, kind_, prefix, needle)                                       \
  do {                                                                                        \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << "no error from: " #stmt;                                               \
    } catch (const ::forge::Error& e) {                                                       \
      const std::string msg = e.what();                                                       \
      EXPECT_EQ(e.kind(), kind_) << msg;                                                      \
      EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;                                             \
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg; \
    }                                                                                         \
  } while (0)

/// All scratch folders of this process live under one folder, removed when the tests end.
fs::path scratch_root() {
  return fs::path(::testing::TempDir()) / ("forge_gpt2_" + std::to_string(::getpid()));
}

class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch_root(), ec);
  }
};
// gtest takes ownership of the environment (its API wants a raw pointer).
[[maybe_unused]] ::testing::Environment* const scratch_cleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

std::string scratch(const std::string& name) {
  const fs::path p = scratch_root() / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

/// Deterministic pseudo-random token ids in [0, vocab).
std::vector<uint32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  uint64_t s = seed * 2654435761ULL + 12345;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<uint32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return v;
}

Tensor u32(const std::vector<uint32_t>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

Tensor ids_tensor(const std::vector<std::vector<uint32_t>>& rows) {
  std::vector<uint32_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_vector(
      flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

json to_json_rows(const std::vector<std::vector<uint32_t>>& rows) {
  json j = json::array();
  for (const auto& r : rows) j.push_back(r);
  return j;
}

uint32_t argmax(const float* x, int64_t n) {
  return static_cast<uint32_t>(std::max_element(x, x + n) - x);
}

/// |a - ref| <= tol * max(1, max |ref|) elementwise; ref is [B][T][V] JSON.
void expect_logits_near(const std::vector<float>& got, const json& ref, double tol,
                        const std::string& what) {
  std::vector<double> want;
  for (const auto& b : ref)
    for (const auto& t : b)
      for (const auto& v : t) want.push_back(v.get<double>());
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0, worst = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, tol * scale) << what << ": max |error| " << worst << ", logit scale " << scale;
}

// ------------------------------------------------------------------------------------------
// Reference models, made once per test run by the Python script.
// ------------------------------------------------------------------------------------------

struct RefModel {
  std::string name, dir;
  json config;
  std::string dtype;
  bool prefix = false, untied = false, extra = false;
  int shards = 1;
};

json hf_config(int64_t L, int64_t H, int64_t C, int64_t P, int64_t V) {
  return {{"model_type", "gpt2"},
          {"n_layer", L},
          {"n_head", H},
          {"n_embd", C},
          {"n_positions", P},
          {"vocab_size", V},
          {"layer_norm_epsilon", 1e-5},
          {"activation_function", "gelu_new"}};
}

struct Reference {
  std::vector<RefModel> models;
  // Per model: B = 2 batch, its reference output; and the B = 1 greedy prompt + output.
  std::vector<std::vector<std::vector<uint32_t>>> batch;
  std::vector<json> batch_out;
  std::vector<std::vector<uint32_t>> prompt;
  std::vector<json> prompt_out;
  std::vector<uint32_t> long_ids;  // for windowed evaluation on model 0
  json eval_out;                   // [{window, stride, loss, windows}]
};

constexpr int kGreedy = 64;

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    r.models = {
        {"odd", scratch("ref_odd"), hf_config(2, 3, 48, 96, 203), "F32", false, false, false, 1},
        {"f16", scratch("ref_f16"), hf_config(2, 4, 32, 80, 517), "F16", true, false, true, 3},
        {"bf16u", scratch("ref_bf16u"), hf_config(1, 2, 24, 72, 97), "BF16", false, true, false, 1},
    };
    // Older configs name the context n_ctx: exercise that spelling in one model.
    r.models[2].config.erase("n_positions");
    r.models[2].config["n_ctx"] = 72;
    json reqs = json::array();
    uint32_t seed = 1;
    for (const RefModel& m : r.models) {
      reqs.push_back({{"cmd", "make"},
                      {"dir", m.dir},
                      {"config", m.config},
                      {"seed", seed},
                      {"dtype", m.dtype},
                      {"prefix", m.prefix},
                      {"untied", m.untied},
                      {"shards", m.shards},
                      {"extra_buffers", m.extra}});
      const int64_t V = m.config["vocab_size"];
      r.batch.push_back({random_ids(16, V, seed * 10), random_ids(16, V, seed * 10 + 1)});
      r.prompt.push_back(random_ids(7, V, seed * 10 + 2));
      ++seed;
    }
    for (size_t i = 0; i < r.models.size(); ++i) {
      reqs.push_back({{"cmd", "forward"},
                      {"dir", r.models[i].dir},
                      {"ids", to_json_rows(r.batch[i])},
                      {"greedy", 0}});
      reqs.push_back({{"cmd", "forward"},
                      {"dir", r.models[i].dir},
                      {"ids", to_json_rows({r.prompt[i]})},
                      {"greedy", kGreedy}});
    }
    r.long_ids = random_ids(250, 203, 99);
    const std::vector<std::pair<int, int>> windows = {{96, 96}, {50, 20}, {40, 40}, {7, 3}};
    for (auto [w, s] : windows)
      reqs.push_back({{"cmd", "eval"},
                      {"dir", r.models[0].dir},
                      {"ids", r.long_ids},
                      {"window", w},
                      {"stride", s}});
    const json out = test::run_python("gpt2_reference.py", {{"cmd", "batch"}, {"requests", reqs}});
    const json& res = out.at("results");
    size_t k = r.models.size();
    for (size_t i = 0; i < r.models.size(); ++i) {
      r.batch_out.push_back(res[k++]);
      r.prompt_out.push_back(res[k++]);
    }
    for (auto [w, s] : windows) {
      json e = res[k++];
      e["window"] = w;
      e["stride"] = s;
      r.eval_out.push_back(e);
    }
    return r;
  }();
  return ref;
}

/// Greedy decoding with the KV cache: prefill the prompt, then n decode steps.
std::vector<uint32_t> greedy_cached(const Model& m, const std::vector<uint32_t>& prompt, int n) {
  KVCache cache(m, 1);
  const int64_t V = m.config().vocab_size;
  Tensor logits = m.forward_cached(ids_tensor({prompt}), cache);  // [1, V]
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) {
    const uint32_t next = argmax(logits.to_vector<float>().data(), V);
    out.push_back(next);
    if (i + 1 < n) logits = m.forward_cached(u32({next}, {1, 1}), cache);
  }
  return out;
}

/// Greedy decoding through a GreedyDecoder after the prompt's prefill.
std::vector<uint32_t> greedy_decoder(const Model& m, const std::vector<uint32_t>& prompt, int n) {
  KVCache cache(m, 1);
  const Tensor logits = m.forward_cached(ids_tensor({prompt}), cache);  // [1, V]
  std::vector<uint32_t> out = {argmax(logits.to_vector<float>().data(), m.config().vocab_size)};
  GreedyDecoder decoder(m, cache, out[0], n - 1);
  while (static_cast<int>(out.size()) < n) out.push_back(decoder.next());
  EXPECT_EQ(cache.length(), static_cast<int64_t>(prompt.size()) + n - 1);
  EXPECT_THROW(decoder.next(), Error);  // all n - 1 steps done
  return out;
}

/// Greedy decoding by full recomputation (no cache).
std::vector<uint32_t> greedy_full(const Model& m, std::vector<uint32_t> seq, int n) {
  const int64_t V = m.config().vocab_size;
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) {
    const int64_t T = static_cast<int64_t>(seq.size());
    // The whole sequence again (hidden states of every position), then the head on the
    // last one only: a big vocabulary makes all-position logits needlessly slow.
    const Tensor h = m.hidden(ids_tensor({seq})).reshape({T, m.config().n_embd});
    const std::vector<float> logits = m.lm_head(h.narrow_rows(T - 1, 1)).to_vector<float>();
    const uint32_t next = argmax(logits.data(), V);
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

std::vector<uint32_t> json_ids(const json& j) { return j.get<std::vector<uint32_t>>(); }

}  // namespace

// ==========================================================================================
// Config
// ==========================================================================================

TEST(Gpt2Config, Presets) {
  const Config g = Config::preset("gpt2");
  EXPECT_EQ(g.n_layer, 12);
  EXPECT_EQ(g.n_head, 12);
  EXPECT_EQ(g.n_embd, 768);
  EXPECT_EQ(g.n_ctx, 1024);
  EXPECT_EQ(g.vocab_size, 50257);
  EXPECT_EQ(g.eos_id, 50256);
  // HF: sum(p.numel() for p in GPT2LMHeadModel(GPT2Config()).parameters()) = 124439808.
  EXPECT_EQ(g.num_params(), 124439808);
  EXPECT_EQ(Config::preset("gpt2-medium").num_params(), 354823168);
  EXPECT_EQ(Config::preset("gpt2-large").num_params(), 774030080);
  EXPECT_EQ(Config::preset("gpt2-xl").num_params(), 1557611200);
  for (const std::string& n : Config::preset_names()) EXPECT_NO_THROW(Config::preset(n).validate());
  EXPECT_FORGE_ERROR(Config::preset("gpt3"), ErrorKind::Format, "gpt2::Config", "gpt3");
}

TEST(Gpt2Config, ParsesHfJson) {
  const Config c = Config::from_json(R"({"model_type": "gpt2", "n_layer": 3, "n_head": 4,
      "n_embd": 32, "n_positions": 50, "n_ctx": 7, "vocab_size": 99,
      "layer_norm_epsilon": 1e-6, "bos_token_id": 5, "eos_token_id": 50256,
      "activation_function": "gelu_new", "n_inner": null, "resid_pdrop": 0.1})");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_ctx, 50);  // n_positions wins over n_ctx
  EXPECT_EQ(c.vocab_size, 99);
  EXPECT_FLOAT_EQ(c.eps, 1e-6f);
  EXPECT_EQ(c.bos_id, 5);
  EXPECT_EQ(c.eos_id, -1);  // HF's default 50256 outside a 99-token vocabulary
  EXPECT_TRUE(c.tie_word_embeddings);
  // Older files: n_ctx only.
  EXPECT_EQ(
      Config::from_json(R"({"n_layer":1,"n_head":1,"n_embd":8,"n_ctx":9,"vocab_size":3})").n_ctx,
      9);
}

TEST(Gpt2Config, JsonRoundTrip) {
  Config c = Config::preset("tiny");
  c.eps = 1e-5f;
  c.tie_word_embeddings = false;
  const Config back = Config::from_json(c.to_json());
  EXPECT_EQ(back, c);
  const json j = json::parse(c.to_json());
  EXPECT_EQ(j["n_positions"], 64);
  EXPECT_EQ(j["layer_norm_epsilon"].get<double>(), 1e-5);  // shortest form, not 9.99e-06
  EXPECT_EQ(j["model_type"], "gpt2");
}

TEST(Gpt2Config, RejectsBadJson) {
  const std::string base = R"("n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16)";
  auto with = [&](const std::string& extra) { return "{" + base + ", " + extra + "}"; };
  EXPECT_NO_THROW(Config::from_json(with(R"("vocab_size": 10)")));
  EXPECT_FORGE_ERROR(Config::from_json("{nope"), ErrorKind::Format, "gpt2::Config", "invalid JSON");
  EXPECT_FORGE_ERROR(Config::from_json("[1, 2]"), ErrorKind::Format, "gpt2::Config", "object");
  EXPECT_FORGE_ERROR(Config::from_json("{" + base + "}"), ErrorKind::Format, "gpt2::Config",
                     "vocab_size");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": "10")")), ErrorKind::Format,
                     "gpt2::Config", "integer");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10.5)")), ErrorKind::Format,
                     "gpt2::Config", "integer");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 0)")), ErrorKind::Format,
                     "gpt2::Config", "vocab_size");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": -3)")), ErrorKind::Format,
                     "gpt2::Config", "vocab_size");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 100000000000)")), ErrorKind::Format,
                     "gpt2::Config", "vocab_size");
  EXPECT_FORGE_ERROR(
      Config::from_json(R"({"n_layer": 2, "n_head": 3, "n_embd": 8, "n_ctx": 4, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "not divisible");
  EXPECT_FORGE_ERROR(
      Config::from_json(R"({"n_layer": 0, "n_head": 1, "n_embd": 8, "n_ctx": 4, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "n_layer");
  EXPECT_FORGE_ERROR(
      Config::from_json(
          R"({"n_layer": 1000, "n_head": 64, "n_embd": 65536, "n_ctx": 4, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "parameters");
  EXPECT_FORGE_ERROR(
      Config::from_json(R"({"n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "n_positions");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "layer_norm_epsilon": -1)")),
                     ErrorKind::Format, "gpt2::Config", "epsilon");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "model_type": "llama")")),
                     ErrorKind::Unsupported, "gpt2::Config", "model_type");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "activation_function": "relu")")),
                     ErrorKind::Unsupported, "gpt2::Config", "relu");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "n_inner": 7)")),
                     ErrorKind::Unsupported, "gpt2::Config", "n_inner");
  EXPECT_FORGE_ERROR(Config::from_json_file(scratch("no_such_config.json")), ErrorKind::Io,
                     "gpt2::Config", "cannot read");
}

// Attention variants HF's GPT2Config can ask for and forge does not compute: refused, not
// silently run as plain GPT-2 (their defaults and explicit plain values load); flags of the
// wrong type are format errors.
TEST(Gpt2Config, RejectsAttentionVariantsForgeDoesNotCompute) {
  const std::string base =
      R"("n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16, "vocab_size": 10)";
  auto with = [&](const std::string& extra) { return "{" + base + ", " + extra + "}"; };
  EXPECT_NO_THROW(Config::from_json(with(R"("scale_attn_weights": true)")));
  EXPECT_NO_THROW(Config::from_json(with(R"("scale_attn_by_inverse_layer_idx": false)")));
  EXPECT_NO_THROW(Config::from_json(with(R"("add_cross_attention": false)")));
  EXPECT_NO_THROW(Config::from_json(with(R"("scale_attn_weights": null)")));
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("scale_attn_weights": false)")),
                     ErrorKind::Unsupported, "gpt2::Config", "scale_attn_weights = false");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("scale_attn_by_inverse_layer_idx": true)")),
                     ErrorKind::Unsupported, "gpt2::Config", "scale_attn_by_inverse_layer_idx");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("add_cross_attention": true)")),
                     ErrorKind::Unsupported, "gpt2::Config", "add_cross_attention");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("add_cross_attention": 1)")), ErrorKind::Format,
                     "gpt2::Config", "true or false");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("scale_attn_weights": "yes")")), ErrorKind::Format,
                     "gpt2::Config", "true or false");
}

// A config.json over 1 MiB is refused before it is read (a real one is ~1 KB); one just
// under the cap, padded with whitespace, still loads.
TEST(Gpt2Config, RefusesAConfigFileOverOneMebibyte) {
  const std::string body =
      R"({"n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16, "vocab_size": 10})";
  const std::string under = scratch("config_under_1mib.json"), over = scratch("config_1mib.json");
  const size_t cap = size_t{1} << 20;
  std::ofstream(under, std::ios::binary) << body << std::string(cap - body.size(), ' ');
  std::ofstream(over, std::ios::binary) << body << std::string(cap + 1 - body.size(), ' ');
  EXPECT_EQ(fs::file_size(under), cap);
  EXPECT_EQ(Config::from_json_file(under).n_layer, 2);
  EXPECT_FORGE_ERROR(Config::from_json_file(over), ErrorKind::Format, "gpt2::Config",
                     "too large for a config");
  fs::remove(under);
  fs::remove(over);
}

// ==========================================================================================
// Against the float64 reference
// ==========================================================================================

class Gpt2Reference : public ::testing::TestWithParam<int> {};

TEST_P(Gpt2Reference, LogitsAndLoss) {
  FORGE_REQUIRE_TORCH();
  const Reference& ref = reference();
  const size_t i = static_cast<size_t>(GetParam());
  const Model m = Model::load(ref.models[i].dir);
  EXPECT_EQ(m.weights().lm_head.defined(), ref.models[i].untied);
  EXPECT_EQ(m.config().tie_word_embeddings, !ref.models[i].untied);
  const Tensor ids = ids_tensor(ref.batch[i]);
  const Tensor logits = m.forward(ids);
  EXPECT_EQ(logits.shape(), Shape({2, 16, m.config().vocab_size}));
  expect_logits_near(logits.to_vector<float>(), ref.batch_out[i]["logits"], 1e-4,
                     ref.models[i].name);
  const double want = ref.batch_out[i]["loss"];
  const EvalResult e = evaluate(m, ids);
  EXPECT_NEAR(e.loss, want, 1e-5 * want);
  EXPECT_NEAR(e.perplexity, std::exp(want), 1e-5 * std::exp(want));
  EXPECT_EQ(e.tokens, 32);
  EXPECT_EQ(e.predictions, 30);
}

TEST_P(Gpt2Reference, GreedyWithAndWithoutCache) {
  FORGE_REQUIRE_TORCH();
  const Reference& ref = reference();
  const size_t i = static_cast<size_t>(GetParam());
  const Model m = Model::load(ref.models[i].dir);
  const std::vector<uint32_t> want = json_ids(ref.prompt_out[i]["greedy"][0]);
  ASSERT_EQ(want.size(), static_cast<size_t>(kGreedy));
  EXPECT_EQ(greedy_cached(m, ref.prompt[i], kGreedy), want);
  EXPECT_EQ(greedy_full(m, ref.prompt[i], kGreedy), want);
  // The prompt's own logits, from the B = 1 reference run.
  expect_logits_near(m.forward(ids_tensor({ref.prompt[i]})).to_vector<float>(),
                     ref.prompt_out[i]["logits"], 1e-4, ref.models[i].name + " prompt");
}

std::string ref_model_name(const ::testing::TestParamInfo<int>& p) {
  static const char* const names[] = {"F32", "F16PrefixShards", "BF16Untied"};
  return names[p.param];
}
INSTANTIATE_TEST_SUITE_P(Models, Gpt2Reference, ::testing::Values(0, 1, 2), ref_model_name);

TEST(Gpt2, EvaluateInWindowsMatchesReference) {
  FORGE_REQUIRE_TORCH();
  const Reference& ref = reference();
  const Model m = Model::load(ref.models[0].dir);
  for (const json& e : ref.eval_out) {
    EvalOptions o;
    o.window = e["window"];
    o.stride = e["stride"];
    const EvalResult r = evaluate(m, ref.long_ids, o);
    const double want = e["loss"];
    EXPECT_NEAR(r.loss, want, 1e-5 * want) << "window " << o.window << " stride " << o.stride;
    EXPECT_EQ(r.windows, e["windows"].get<int64_t>());
    EXPECT_EQ(r.tokens, 250);
    EXPECT_EQ(r.predictions, 249);
  }
  // The default window is n_ctx (96) with stride = window.
  EXPECT_NEAR(evaluate(m, ref.long_ids).loss, ref.eval_out[0]["loss"].get<double>(),
              1e-5 * ref.eval_out[0]["loss"].get<double>());
}

TEST(Gpt2, SavedModelMatchesReferenceAndReloadsExactly) {
  FORGE_REQUIRE_TORCH();
  Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 40;
  c.n_ctx = 24;
  c.vocab_size = 131;
  c.bos_id = c.eos_id = 130;
  const Model m = Model::random(c, 7);
  const std::string dir = scratch("saved");
  m.save(dir);
  const auto ids = std::vector<std::vector<uint32_t>>{random_ids(20, 131, 5)};
  const std::vector<float> logits = m.forward(ids_tensor(ids)).to_vector<float>();
  const json out = test::run_python("gpt2_reference.py",
                                    {{"cmd", "forward"}, {"dir", dir}, {"ids", to_json_rows(ids)}});
  expect_logits_near(logits, out["logits"], 1e-4, "saved model");
  const Model back = Model::load(dir);
  EXPECT_EQ(back.config(), c);
  EXPECT_EQ(back.forward(ids_tensor(ids)).to_vector<float>(), logits);
}

// ==========================================================================================
// Golden files made by HF transformers (tools/make_golden.py)
// ==========================================================================================

class Gpt2Golden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/" + GetParam();
    if (!fs::exists(dir_ + "/golden.json"))
      FORGE_SKIP_UNLESS_CI(dir_ << " not generated (run tools/make_golden.py)");
    std::ifstream f(dir_ + "/golden.json");
    golden_ = json::parse(f);
    logits_ =
        std::make_unique<SafeTensorsFile>(SafeTensorsFile::open(dir_ + "/golden.safetensors"));
  }

  /// Compares forge logits [B, T, V] with a stored block (all columns or [0, cols)).
  void expect_block(const std::vector<float>& got, int64_t V, const std::string& name) {
    const Tensor want = logits_->load(name);
    const std::vector<float> w = want.to_vector<float>();
    const int64_t cols = want.dim(-1);
    const int64_t rows = want.shape().rows();
    ASSERT_EQ(static_cast<int64_t>(got.size()), rows * V) << name;
    double scale = 1.0, worst = 0.0;
    for (float v : w) scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        worst = std::max(worst, static_cast<double>(std::abs(got[r * V + c] - w[r * cols + c])));
    EXPECT_LE(worst, 1e-4 * scale) << GetParam() << " " << name << ": max |error| " << worst;
  }

  std::string dir_;
  json golden_;
  std::unique_ptr<SafeTensorsFile> logits_;
};

TEST_P(Gpt2Golden, LogitsAndLossMatchHf) {
  const Model m = Model::load(dir_);
  const int64_t V = m.config().vocab_size;
  EXPECT_EQ(m.config().tie_word_embeddings, golden_["tied"].get<bool>());
  for (const std::string key : {"prompt", "batch"}) {
    const auto rows = golden_[key + "_ids"].get<std::vector<std::vector<uint32_t>>>();
    const Tensor ids = ids_tensor(rows);
    expect_block(m.forward(ids).to_vector<float>(), V, key + "_logits");
    const double want = golden_["loss"][key];
    EXPECT_NEAR(evaluate(m, ids).loss, want, 2e-5 * want) << key;
    if (rows.size() == 1) {
      EXPECT_NEAR(evaluate(m, rows[0]).loss, want, 2e-5 * want) << key;
    }
  }
  if (logits_->contains("prompt_last_row")) {
    // The full row of the prompt's last position, through the cached path.
    KVCache cache(m, 1);
    const auto rows = golden_["prompt_ids"].get<std::vector<std::vector<uint32_t>>>();
    expect_block(m.forward_cached(ids_tensor(rows), cache).to_vector<float>(), V,
                 "prompt_last_row");
  }
}

TEST_P(Gpt2Golden, GreedyTokensMatchHfWithAndWithoutCache) {
  const Model m = Model::load(dir_);
  for (const json& g : golden_["greedy"]) {
    const std::vector<uint32_t> prompt = json_ids(g["prompt"]);
    const std::vector<uint32_t> want = json_ids(g["tokens"]);
    ASSERT_GE(want.size(), 64u);
    const int n = static_cast<int>(want.size());
    EXPECT_EQ(greedy_cached(m, prompt, n), want) << "min top-2 gap " << g["min_top2_gap"];
    EXPECT_EQ(greedy_full(m, prompt, n), want) << "min top-2 gap " << g["min_top2_gap"];
    EXPECT_EQ(greedy_decoder(m, prompt, n), want) << "min top-2 gap " << g["min_top2_gap"];
  }
}

std::string golden_name(const ::testing::TestParamInfo<std::string>& p) { return p.param; }
INSTANTIATE_TEST_SUITE_P(Hf, Gpt2Golden,
                         ::testing::Values("odd", "f16_50257", "noprefix_bf16", "untied"),
                         golden_name);

// ==========================================================================================
// forge eval (the CLI)
// ==========================================================================================

namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

/// Runs the forge binary with `args`, capturing stdout and stderr.
CliRun run_forge(const std::string& args) {
  const std::string out = scratch("cli_out"), err = scratch("cli_err");
  const std::string cmd =
      std::string(FORGE_BINARY) + " " + args + " > " + out + " 2> " + err + " < /dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

/// GPT-2's byte-to-character map (bytes_to_unicode), UTF-8 encoded: the vocabulary of a
/// byte-level tokenizer with no merges, where token id = byte value.
std::string byte_token(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

TEST(Gpt2Cli, EvalMatchesTheLibraryOnIdsAndText) {
  const std::string dir = std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/noprefix_bf16";
  if (!fs::exists(dir + "/config.json")) FORGE_SKIP_UNLESS_CI("no golden model in " << dir);
  const Model m = Model::load(dir);

  // --ids
  const std::vector<uint32_t> ids = random_ids(150, 257, 21);
  std::string list;
  for (uint32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  CliRun r = run_forge("eval -m " + dir + " --ids " + list + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  const EvalResult want = evaluate(m, ids);  // 150 tokens > ctx 80: two windows
  EXPECT_EQ(want.windows, 2);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), want.loss);
  EXPECT_DOUBLE_EQ(j["perplexity"].get<double>(), want.perplexity);
  EXPECT_EQ(j["tokens"], 150);
  EXPECT_EQ(j["predictions"], 149);
  EXPECT_EQ(j["windows"], 2);
  EXPECT_EQ(j["window"], 80);
  EXPECT_EQ(j["stride"], 80);
  r = run_forge("eval -m " + dir + " --ids " + list + " --window 30 --stride 10 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json::parse(r.out)["loss"].get<double>(),
                   evaluate(m, ids, {.window = 30, .stride = 10}).loss);

  // --text-file through a byte-level tokenizer (257 tokens: bytes + <|endoftext|>), whose
  // ids are the text's bytes.
  const std::string tok = scratch("bytetok");
  fs::create_directories(tok);
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = b;
  vocab["<|endoftext|>"] = 256;
  std::ofstream(tok + "/vocab.json") << vocab.dump();
  std::ofstream(tok + "/merges.txt") << "#version: 0.2\n";
  const std::string text = "Hello, world! \xc3\xa9t\xc3\xa9 \t 123\nforge eval reads bytes.";
  const std::string file = scratch("text.txt");
  std::ofstream(file, std::ios::binary) << text;
  r = run_forge("eval -m " + dir + " --tokenizer " + tok + " --text-file " + file + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<uint32_t> bytes;
  for (unsigned char c : text) bytes.push_back(c);
  EXPECT_DOUBLE_EQ(json::parse(r.out)["loss"].get<double>(), evaluate(m, bytes).loss);
  EXPECT_EQ(json::parse(r.out)["tokens"], static_cast<int64_t>(text.size()));
  // Plain output.
  r = run_forge("eval -m " + dir + " --ids 1,2,3");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("loss ", 0), 0u) << r.out;
}

TEST(Gpt2Cli, EvalRejectsBadInput) {
  const std::string dir = std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/noprefix_bf16";
  if (!fs::exists(dir + "/config.json")) FORGE_SKIP_UNLESS_CI("no golden model in " << dir);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"eval -m " + scratch("none") + " --ids 1,2", "does not exist"},
      {"eval -m " + dir, "exactly one of --ids or --text-file"},
      {"eval -m " + dir + " --ids 1", "at least 2 tokens"},
      {"eval -m " + dir + " --ids 1,x", "not a token id"},
      {"eval -m " + dir + " --ids 1,,2", "not a token id"},
      {"eval -m " + dir + " --ids 1,257", "token id 257"},
      {"eval -m " + dir + " --ids 1,99999999999", "not a token id"},
      {"eval -m " + dir + " --ids 1,2 --window 81", "window"},
      {"eval -m " + dir + " --ids 1,2 --window 5 --stride 6", "stride"},
      {"eval -m " + dir + " --text-file " + scratch("missing.txt"), "tokenizer"},
      {"eval -m " + dir + " --tokenizer " + dir + " --text-file /dev/null", "tokenizer"},
  };
  for (const auto& [args, needle] : cases) {
    const CliRun r = run_forge(args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": " << r.err;
  }
}

// ==========================================================================================
// Self-consistency (no Python)
// ==========================================================================================

namespace {
Config odd_config() {
  Config c;
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 48;
  c.n_ctx = 40;
  c.vocab_size = 203;
  c.bos_id = c.eos_id = 0;
  return c;
}

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

// ==========================================================================================
// Bad input
// ==========================================================================================

TEST(Gpt2BadInput, ModelFolders) {
  const char* load = "gpt2::Model::load";
  EXPECT_FORGE_ERROR(Model::load(scratch("nowhere")), ErrorKind::Io, load, "no model folder");
  const std::string empty = scratch("empty");
  fs::create_directories(empty);
  EXPECT_FORGE_ERROR(Model::load(empty), ErrorKind::Io, load, "config.json");

  const Config c = odd_config();
  const Model good = Model::random(c, 1);
  const std::string dir = scratch("good");
  good.save(dir);
  EXPECT_NO_THROW(Model::load(dir));

  auto copy_of = [&](const std::string& name) {
    const std::string d = scratch(name);
    fs::copy(dir, d);
    return d;
  };
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  };
  {  // weights missing
    const std::string d = copy_of("no_weights");
    fs::remove(d + "/model.safetensors");
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Io, load, "model.safetensors");
  }
  {  // invalid config.json
    const std::string d = copy_of("bad_json");
    write(d + "/config.json", "{\"n_layer\": 2,");
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "invalid JSON");
  }
  {  // config inconsistent with itself
    const std::string d = copy_of("bad_heads");
    std::string text = c.to_json();
    text.replace(text.find("\"n_head\": 3"), 11, "\"n_head\": 5");
    write(d + "/config.json", text);
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "not divisible");
  }
  {  // config that does not match the tensors
    const std::string d = copy_of("bad_vocab");
    Config bad = c;
    bad.vocab_size = 204;
    write(d + "/config.json", bad.to_json());
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "[204, 48]");
  }
  {  // more layers than the file holds
    const std::string d = copy_of("bad_layers");
    Config bad = c;
    bad.n_layer = 3;
    write(d + "/config.json", bad.to_json());
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "missing tensor \"h.2.");
  }
  // Tensor-level damage: rewrite model.safetensors from the good model's tensors.
  const SafeTensorsFile src = SafeTensorsFile::open(dir + "/model.safetensors");
  auto rewrite = [&](const std::string& name, auto edit) {
    const std::string d = copy_of(name);
    NamedTensors ts;
    for (const std::string& n : src.names()) ts.emplace_back(n, src.load(n).clone());
    edit(ts);
    save_safetensors(d + "/model.safetensors", ts);
    return d;
  };
  {
    const std::string d = rewrite("missing_tensor", [](NamedTensors& ts) {
      ts.erase(
          std::find_if(ts.begin(), ts.end(), [](auto& p) { return p.first == "h.1.ln_2.bias"; }));
    });
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "missing tensor \"h.1.ln_2.bias\"");
  }
  {
    const std::string d = rewrite("wrong_shape", [](NamedTensors& ts) {
      for (auto& [n, t] : ts)
        if (n == "h.0.attn.c_attn.weight") t = Tensor::zeros({144, 48});  // transposed
    });
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "h.0.attn.c_attn.weight");
  }
  {
    const std::string d = rewrite("int_tensor", [](NamedTensors& ts) {
      for (auto& [n, t] : ts)
        if (n == "ln_f.bias") t = Tensor::zeros({48}, DType::U32);
    });
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Unsupported, load, "ln_f.bias");
  }
  {  // untied config without a head
    const std::string d = copy_of("untied_no_head");
    Config bad = c;
    bad.tie_word_embeddings = false;
    write(d + "/config.json", bad.to_json());
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "lm_head.weight");
  }
  {  // a head stored but identical to wte stays tied
    const std::string d = rewrite("tied_copy", [](NamedTensors& ts) {
      for (auto& [n, t] : ts)
        if (n == "wte.weight") ts.emplace_back("lm_head.weight", t.clone());
    });
    const Model m = Model::load(d);
    EXPECT_FALSE(m.weights().lm_head.defined());
    EXPECT_TRUE(m.config().tie_word_embeddings);
  }
  {  // a truncated weights file
    const std::string d = copy_of("truncated");
    fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") / 2);
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "");
  }
}

TEST(Gpt2BadInput, ForwardAndCache) {
  const Config c = odd_config();
  const Model m = Model::random(c, 1);
  const char* fwd = "gpt2::Model::forward";
  EXPECT_FORGE_ERROR(m.forward(u32({1u, 203u}, {1, 2})), ErrorKind::Range, fwd, "token id 203");
  EXPECT_FORGE_ERROR(m.forward(Tensor::from_vector(random_ids(41, 203, 1), {1, 41})),
                     ErrorKind::Range, fwd, "n_ctx = 40");
  EXPECT_FORGE_ERROR(m.forward(Tensor::from_vector(std::vector<float>{1, 2}, {1, 2})),
                     ErrorKind::DType, fwd, "u32");
  EXPECT_FORGE_ERROR(m.forward(Tensor::zeros({1, 0}, DType::U32)), ErrorKind::Shape, fwd,
                     "no tokens");
  EXPECT_FORGE_ERROR(m.forward(Tensor::zeros({1, 2, 3}, DType::U32)), ErrorKind::Shape, fwd,
                     "[B, T]");
  EXPECT_FORGE_ERROR(m.forward(Tensor()), ErrorKind::Shape, fwd, "undefined");
  // [T] is B = 1.
  EXPECT_EQ(m.forward(u32({1u, 2u, 3u}, {3})).shape(), Shape({1, 3, 203}));

  const char* fc = "gpt2::Model::forward_cached";
  KVCache cache(m, 2, 10);
  EXPECT_FORGE_ERROR(m.forward_cached(u32({1u, 2u}, {1, 2}), cache), ErrorKind::Shape, fc, "batch");
  EXPECT_FORGE_ERROR(m.forward_cached(Tensor::zeros({2, 11}, DType::U32), cache), ErrorKind::Range,
                     fc, "capacity of 10");
  EXPECT_FORGE_ERROR(m.forward_cached(u32({1u, 999u}, {2, 1}), cache), ErrorKind::Range, fc,
                     "token id 999");
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(m.forward_cached(Tensor::zeros({2, 10}, DType::U32), cache).shape(), Shape({2, 203}));
  EXPECT_FORGE_ERROR(m.forward_cached(Tensor::zeros({2, 1}, DType::U32), cache), ErrorKind::Range,
                     fc, "overflow");
  // A cache of another model shape.
  Config other = c;
  other.n_head = 4;
  const Model m4 = Model::random(other, 1);
  KVCache c4(m4, 1);
  EXPECT_FORGE_ERROR(m.forward_cached(Tensor::zeros({1, 1}, DType::U32), c4), ErrorKind::Shape, fc,
                     "another model");

  EXPECT_FORGE_ERROR(KVCache(m, 0), ErrorKind::Range, "gpt2::KVCache", "batch");
  EXPECT_FORGE_ERROR(KVCache(m, 1, 41), ErrorKind::Range, "gpt2::KVCache", "capacity");
  EXPECT_FORGE_ERROR(KVCache(m, 1, -1), ErrorKind::Range, "gpt2::KVCache", "capacity");
  EXPECT_FORGE_ERROR(KVCache(m, int64_t{1} << 40), ErrorKind::Range, "gpt2::KVCache", "memory");
}

TEST(Gpt2BadInput, EvaluateAndBuild) {
  const Config c = odd_config();
  const Model m = Model::random(c, 1);
  const char* ev = "gpt2::evaluate";
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5}), ErrorKind::Shape, ev, "at least 2");
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5, 203}), ErrorKind::Range, ev,
                     "token id 203");
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5, 6}, {.window = 41, .stride = 0}),
                     ErrorKind::Range, ev, "window");
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5, 6}, {.window = 10, .stride = 11}),
                     ErrorKind::Range, ev, "stride");
  EXPECT_FORGE_ERROR(evaluate(m, Tensor::zeros({1, 41}, DType::U32)), ErrorKind::Range, ev,
                     "n_ctx");
  EXPECT_FORGE_ERROR(evaluate(m, Tensor::zeros({2, 1}, DType::U32)), ErrorKind::Shape, ev,
                     "T >= 2");

  Config bad = c;
  bad.n_embd = 50;
  EXPECT_FORGE_ERROR(Model::random(bad, 1), ErrorKind::Format, "gpt2::Model::random",
                     "not divisible");
  Weights w = m.weights();
  w.layers[1].fc_w = Tensor::zeros({48, 100});
  EXPECT_FORGE_ERROR(Model::from_weights(c, w), ErrorKind::Format, "gpt2::Model::from_weights",
                     "h.1.mlp.c_fc.weight");
  w = m.weights();
  w.wte = w.wte.narrow_rows(0, 100);
  EXPECT_FORGE_ERROR(Model::from_weights(c, w), ErrorKind::Format, "gpt2::Model::from_weights",
                     "wte.weight has shape [100, ");
  w = m.weights();
  w.layers.pop_back();
  EXPECT_FORGE_ERROR(Model::from_weights(c, w), ErrorKind::Format, "gpt2::Model::from_weights",
                     "layers");
}
