// GPT-2 model tests: loading (prefixes, dtypes, shards, tied/untied head), the forward pass
// against an independent float64 reference (tests/python/gpt2_reference.py), evaluation
// windows, save round trip, `forge eval`. Config parsing and the bad inputs:
// test_gpt2_inputs.cpp; KV-cache decode and batching against the full forward:
// test_gpt2_self_consistency.cpp.
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
#include "gpt2_test_util.h"
#include "pyref.h"

using namespace forge;
using namespace forge::gpt2;
using nlohmann::json;
using namespace forge::test::gpt2_tests;
namespace fs = std::filesystem;

namespace {

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

json to_json_rows(const std::vector<std::vector<uint32_t>>& rows) {
  json j = json::array();
  for (const auto& r : rows) j.push_back(r);
  return j;
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
