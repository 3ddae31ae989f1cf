// forge's GGUF files read by llama.cpp itself (npm node-llama-cpp 3.21.1, installed by
// scripts/setup_llamacpp.sh; driven by tools/llamacpp/run.mjs): the same greedy tokens as
// forge for f32, f16 and q8_0 weights, the same tokenizer ids, and next-token probabilities
// that agree within the bounds stated below.
//
// The model has random weights scaled up (std 8 / sqrt(n_embd)) so that its predictions are
// sharp: with GPT-2's init (0.02) the logits are nearly flat and the argmax would be decided
// by rounding noise, in either engine.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ci.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "forge/tokenizer.h"
#include "gpt2_test_util.h"

namespace forge::test {
namespace {

namespace fs = std::filesystem;
using gpt2_tests::scratch;
const std::string kRunner = FORGE_SOURCE_DIR "/tools/llamacpp/run.mjs";
const std::string kModules = FORGE_SOURCE_DIR "/tools/llamacpp/node_modules/node-llama-cpp";
const std::string kTokDir = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";

// Runs run.mjs with `args`; its one JSON line, or a failure with stderr folded in.
nlohmann::json llama(const std::string& args) {
  const std::string cmd = "node " + kRunner + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  if (status != 0) throw std::runtime_error(cmd + " failed: " + out);
  const size_t start = out.rfind("\n{");  // the JSON line is the last one
  return nlohmann::json::parse(start == std::string::npos ? out : out.substr(start + 1));
}

bool have_llamacpp() {
  return fs::exists(kModules) && std::system("node --version > /dev/null 2>&1") == 0;
}

#define SKIP_WITHOUT_LLAMACPP()                                                                  \
  do {                                                                                           \
    if (!have_llamacpp()) {                                                                      \
      if (forge::test::under_ci()) FAIL() << "llama.cpp (scripts/setup_llamacpp.sh) is missing"; \
      GTEST_SKIP() << "node-llama-cpp is not installed (scripts/setup_llamacpp.sh)";             \
    }                                                                                            \
  } while (0)

// Two layers of 64, GPT-2's vocabulary, weights std 8 / sqrt(64) = 1.
gpt2::Model sharp_model() {
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.n_ctx = 128;
  c.vocab_size = 50257;
  gpt2::Model m = gpt2::Model::random(c, 21);
  const float gain = 8.0f / std::sqrt(64.0f) / 0.02f;
  gpt2::Weights& w = m.weights();
  scale_(w.wte, gain);
  for (gpt2::LayerWeights& L : w.layers)
    for (Tensor* t : {&L.attn_w, &L.attn_proj_w, &L.fc_w, &L.fc_proj_w}) scale_(*t, gain);
  return m;
}

std::vector<float> last_logits(const gpt2::Model& m, const std::vector<uint32_t>& ids) {
  const Tensor l = m.forward(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}));
  const std::vector<float> all = l.to_vector<float>();
  const size_t V = static_cast<size_t>(m.config().vocab_size);
  return std::vector<float>(all.end() - static_cast<std::ptrdiff_t>(V), all.end());
}

std::vector<uint32_t> forge_greedy(const gpt2::Model& m, std::vector<uint32_t> ids, int n) {
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> l = last_logits(m, ids);
    const auto best = static_cast<uint32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(best);
    ids.push_back(best);
  }
  return out;
}

std::string csv(const std::vector<uint32_t>& v) {
  std::string s;
  for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

const std::vector<uint32_t> kPrompt = {15496, 11,  616,
                                       3290,  318, 13779};  // "Hello, my dog is cute"

TEST(LlamaCpp, GreedyTokensOfForgesFilesEqualForges) {
  SKIP_WITHOUT_LLAMACPP();
  const gpt2::Model base = sharp_model();
  const Tokenizer tok = Tokenizer::load(kTokDir);
  for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(t));
    const gpt2::Model m = base.converted(t);
    const std::string path = scratch(std::string("llama_") + dtype_name(t) + ".gguf");
    m.save_gguf(path, tok, "interop");
    const std::vector<uint32_t> want = forge_greedy(m, kPrompt, 24);
    const nlohmann::json got =
        llama("greedy --exact --model " + path + " --ids " + csv(kPrompt) + " --n 24");
    EXPECT_EQ(got.at("tokens").get<std::vector<uint32_t>>(), want);
  }
}

// Probabilities: llama.cpp exposes them, not logits. Bound: 2e-3 absolute on the ten most
// likely tokens of f32 weights (both engines compute in f32; llama.cpp's ggml sums in other
// orders, and its softmax reads logits of magnitude ~30 here, where f32 keeps ~2e-6).
TEST(LlamaCpp, NextTokenProbabilitiesAgree) {
  SKIP_WITHOUT_LLAMACPP();
  const gpt2::Model m = sharp_model();
  const std::string path = scratch("llama_probs.gguf");
  m.save_gguf(path, Tokenizer::load(kTokDir), "interop");
  const std::vector<float> l = last_logits(m, kPrompt);
  const double mx = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (float v : l) z += std::exp(v - mx);
  const nlohmann::json got =
      llama("probs --exact --model " + path + " --ids " + csv(kPrompt) + " --top 10");
  ASSERT_EQ(got.at("top").size(), 10u);
  double top_p = 0;
  for (const auto& e : got.at("top")) {
    const uint32_t id = e.at("id").get<uint32_t>();
    const double p = e.at("p").get<double>();
    const double want = std::exp(l[id] - mx) / z;
    EXPECT_NEAR(p, want, 2e-3) << "token " << id;
    top_p += p;
  }
  EXPECT_GT(top_p, 0.5);  // sharp enough that the check means something
}

TEST(LlamaCpp, TokenizerIdsEqualForges) {
  SKIP_WITHOUT_LLAMACPP();
  const Tokenizer tok = Tokenizer::load(kTokDir);
  const std::string path = scratch("llama_tok.gguf");
  sharp_model().save_gguf(path, tok, "interop");
  const std::string text_path = scratch("llama_tok.txt");
  const std::string text =
      "Hello, my dog is cute. It's 3.14159 o'clock\n\n  naïve café — 東京 "
      "🦊<|endoftext|>don't "
      "STOP    spaces\ttabs";
  FILE* f = std::fopen(text_path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  const nlohmann::json got = llama("tokenize --model " + path + " --text-file " + text_path);
  EXPECT_EQ(got.at("ids").get<std::vector<uint32_t>>(), tok.encode(text));
}

}  // namespace
}  // namespace forge::test
