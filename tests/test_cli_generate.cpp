// `forge generate` and `forge bench --preset` end to end (the binary, FORGE_BINARY), plus the
// generation loop's stop strings and text streaming with a tokenizer.
//
// The model is forge's "tiny" preset (vocab 256, n_ctx 64, eos 255), random weights saved to
// a temp folder. The tokenizer is a byte-level one written here: 256 byte tokens, no merges,
// so id b is byte b and the expected text of any ids is known without the tokenizer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<uint32_t>;

using forge::test::CliResult;
using forge::test::parse_json;
using forge::test::run_forge;

Ids json_ids(const json& j) {
  Ids ids;
  if (j.contains("ids"))
    for (const auto& v : j["ids"]) ids.push_back(v.get<uint32_t>());
  return ids;
}

/// GPT-2's byte → printable-character map, written out from its definition: bytes that are
/// printable Latin-1 map to themselves, the others to U+0100.. in byte order.
std::string byte_char(int b) {
  auto printable = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
  };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
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

std::string bytes_of(const Ids& ids) {
  std::string s;
  for (uint32_t id : ids) s += static_cast<char>(id);
  return s;
}

fs::path g_plain, g_text;  // model folder without / with tokenizer files

class CliGenerate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!g_plain.empty()) return;
    const fs::path root =
        fs::path(::testing::TempDir()) / ("forge_cli_generate_" + std::to_string(::getpid()));
    g_plain = root / "tiny";
    g_text = root / "tiny_text";
    const auto m = forge::gpt2::Model::random(forge::gpt2::Config::preset("tiny"), 3);
    m.save(g_plain.string());
    m.save(g_text.string());
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    std::ofstream(g_text / "vocab.json") << vocab.dump();
    std::ofstream(g_text / "merges.txt") << "#version: 0.2\n";
  }
  static std::string plain() { return g_plain.string(); }
  static std::string text() { return g_text.string(); }
};

TEST_F(CliGenerate, JsonIdsHaveTheRightLengthAndRepeatPerSeed) {
  const std::string args =
      "generate -m " + plain() + " --prompt-ids 1,2,3 -n 12 --seed 5 --ignore-eos --json";
  const CliResult a = run_forge(args);
  ASSERT_EQ(a.code, 0) << a.err;
  const json j = parse_json(a);
  EXPECT_EQ(json_ids(j).size(), 12u);
  EXPECT_FALSE(j.contains("text"));  // no tokenizer files
  EXPECT_EQ(j["prompt_tokens"], 3);
  EXPECT_GT(j["prefill_tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
  EXPECT_EQ(j["stop_reason"], "length");
  const CliResult b = run_forge(args);
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(json_ids(parse_json(b)), json_ids(j));
  const CliResult c = run_forge(args + " --threads 1");  // thread count must not matter
  EXPECT_EQ(json_ids(parse_json(c)), json_ids(j));
  const CliResult d = run_forge("generate -m " + plain() +
                                " --prompt-ids 1,2,3 -n 12 --seed 6 --ignore-eos --json");
  EXPECT_NE(json_ids(parse_json(d)), json_ids(j));
}

TEST_F(CliGenerate, GreedyEqualsTheLibrary) {
  const CliResult r =
      run_forge("generate -m " + plain() + " --prompt-ids 5,6,7,8 -n 16 --greedy --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto model = forge::gpt2::Model::load(plain());
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = 16;
  o.sampling.greedy = true;
  const auto lib = forge::gpt2::generate(model, Ids{5, 6, 7, 8}, o);
  EXPECT_EQ(json_ids(parse_json(r)), lib.ids);
  EXPECT_EQ(parse_json(r)["stop_reason"], lib.stop_reason);
}

TEST_F(CliGenerate, StreamsIdsWithoutATokenizer) {
  const std::string args = "generate -m " + plain() + " --prompt-ids 9 -n 6 --seed 1 --ignore-eos";
  const CliResult s = run_forge(args);
  ASSERT_EQ(s.code, 0) << s.err;
  const Ids want = json_ids(parse_json(run_forge(args + " --json")));
  std::string expect;
  for (size_t i = 0; i < want.size(); ++i) expect += (i ? " " : "") + std::to_string(want[i]);
  EXPECT_EQ(s.out, expect + "\n");
}

TEST_F(CliGenerate, TextPromptAndStreamedText) {
  const std::string args = "generate -m " + text() + " -p 'hello' -n 10 --greedy --ignore-eos";
  const CliResult j = run_forge(args + " --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const json js = parse_json(j);
  EXPECT_EQ(js["prompt_tokens"], 5);  // one byte token per character
  EXPECT_TRUE(js.contains("text"));
  const Ids ids = json_ids(js);
  ASSERT_EQ(ids.size(), 10u);
  // Library greedy from the prompt's bytes gives the same ids.
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = 10;
  o.sampling.greedy = true;
  o.stop_at_eos = false;
  EXPECT_EQ(
      forge::gpt2::generate(forge::gpt2::Model::load(text()), Ids{'h', 'e', 'l', 'l', 'o'}, o).ids,
      ids);
  // Streamed stdout: exactly the generated bytes, then a newline.
  const CliResult s = run_forge(args);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.out, bytes_of(ids) + "\n");
  // --tokenizer DIR gives a folder without tokenizer files one.
  const CliResult t = run_forge("generate -m " + plain() + " --tokenizer " + text() +
                                " -p 'hello' -n 10 --greedy --ignore-eos --json");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(json_ids(parse_json(t)), ids);
}

TEST_F(CliGenerate, TruncateKeepsTheLastPromptTokens) {
  std::string ids;
  for (int i = 0; i < 70; ++i) ids += (i ? "," : "") + std::to_string(i);
  const CliResult r =
      run_forge("generate -m " + plain() + " --prompt-ids " + ids + " -n 5 --truncate --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  EXPECT_EQ(j["prompt_tokens"], 60);  // 64 + 1 - 5 positions left for the prompt
  EXPECT_EQ(j["truncated_tokens"], 10);
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

TEST_F(CliGenerate, StopsAtTheEndOfTheContextWithANote) {
  std::string ids;
  for (int i = 0; i < 62; ++i) ids += (i ? "," : "") + std::to_string(i % 200);
  const CliResult r = run_forge("generate -m " + plain() + " --prompt-ids " + ids +
                                " -n 50 --greedy --ignore-eos --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  EXPECT_EQ(json_ids(j).size(), 3u);  // positions 61, 62, 63
  EXPECT_EQ(j["stop_reason"], "context");
  EXPECT_NE(r.err.find("context"), std::string::npos);
}

// Stop strings, in-process (arbitrary bytes need no shell quoting).
TEST_F(CliGenerate, StopStringsCutTheTextAndStreamConsistently) {
  const auto model = forge::gpt2::Model::load(text());
  const forge::Tokenizer tok = forge::Tokenizer::load(text());
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = 24;
  o.sampling.greedy = true;
  o.stop_at_eos = false;
  const Ids prompt = {'a', 'b'};
  const auto free = forge::gpt2::generate(model, prompt, o, &tok);
  ASSERT_EQ(free.ids.size(), 24u);
  const std::string all = bytes_of(free.ids);
  EXPECT_EQ(free.text, all);

  const std::string stop = all.substr(6, 3);
  const size_t at = all.find(stop);  // maybe earlier than 6
  o.stop = {"\x01\x02\x03 never", stop};
  std::string streamed;
  Ids tokens;
  const auto r = forge::gpt2::generate(
      model, prompt, o, &tok,
      [&](uint32_t id) {
        tokens.push_back(id);
        return true;
      },
      [&](std::string_view s) { streamed += s; });
  EXPECT_EQ(r.stop_reason, "stop");
  EXPECT_EQ(r.text, all.substr(0, at));
  EXPECT_EQ(streamed, r.text);
  // The ids run up to the token that completed the stop string.
  EXPECT_EQ(r.ids, Ids(free.ids.begin(), free.ids.begin() + static_cast<long>(at + 3)));
  EXPECT_EQ(tokens, r.ids);

  // A stop string that starts but never completes is released at the end.
  o.stop = {all.substr(20) + "\xff\xfe"};
  streamed.clear();
  const auto r2 =
      forge::gpt2::generate(model, prompt, o, &tok, {}, [&](std::string_view s) { streamed += s; });
  EXPECT_EQ(r2.stop_reason, "length");
  EXPECT_EQ(r2.text, all);
  EXPECT_EQ(streamed, all);
}

TEST_F(CliGenerate, BenchPresetReportsItsFigures) {
  const CliResult r =
      run_forge("bench --preset tiny --prompt-tokens 8 --decode-tokens 4 --batch 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  for (const char* key : {"prefill_tok_s", "decode_tok_s", "peak_rss_mb", "weights_mb",
                          "kv_cache_mb", "decode_step_ms_median"})
    EXPECT_GT(j.value(key, 0.0), 0.0) << key;
  // The host part of a step is a part of it.
  EXPECT_GT(j.value("decode_step_host_ms_median", 0.0), 0.0);
  EXPECT_LE(j["decode_step_host_ms_median"].get<double>(),
            j["decode_step_ms_median"].get<double>());
  EXPECT_GE(j["decode_step_ms_max"].get<double>(), j["decode_step_ms_median"].get<double>());
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["prompt_tokens"], 8);
  EXPECT_EQ(j["decode_tokens"], 4);
  // tiny: 2 layers x 2 (K, V) x batch 2 x 12 positions x 64 floats of 4 bytes.
  EXPECT_NEAR(j["kv_cache_mb"].get<double>(), 2.0 * 2 * 2 * 12 * 64 * 4 / 1048576.0, 1e-9);
  const double params = static_cast<double>(forge::gpt2::Config::preset("tiny").num_params());
  EXPECT_NEAR(j["weights_mb"].get<double>(), params * 4 / 1048576.0, 1e-9);
  const CliResult t = run_forge("bench --preset tiny --prompt-tokens 8 --decode-tokens 4");
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("tok/s"), std::string::npos);
}

TEST_F(CliGenerate, BenchProfileTimesTheModelsOwnKernelsOnTheCpu) {
  const CliResult r = run_forge(
      "bench --preset tiny --prompt-tokens 8 --decode-tokens 2 --train-steps 1 --profile --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  // The real forward's kernels, counted per pass. tiny: 2 layers of 4 weight products (the
  // fused layernorm + matmul seams run as their compositions on the CPU: ln_1, ln_2 of each
  // layer and ln_f), one fused attention per layer, and the tied LM head as a ninth
  // matmul; two gathers (the tokens' and the positions' embeddings); the greedy argmax in
  // the same pass.
  for (const char* pass : {"prefill_profile_ms", "decode_step_profile_ms"}) {
    const auto& p = j.at(pass);
    for (const char* k : {"matmul x9", "attention x2", "layernorm x5", "embedding x2"})
      EXPECT_TRUE(p.contains(k)) << pass << " lacks " << k << ": " << p.dump();
    EXPECT_GT(p.at("sum of ops").get<double>(), 0.0);
  }
  // A training step: one AdamW kernel and one sum of squares per parameter tensor (28 in
  // tiny, wte tied).
  const auto& train = j.at("train_step_profile_ms");
  EXPECT_TRUE(train.contains("adamw x28")) << train.dump();
  EXPECT_TRUE(train.contains("sumsq x28")) << train.dump();
}

struct BadCase {
  const char* name;
  std::string args;  // after "generate -m <plain folder>" unless it starts with '!'
  const char* mentions;
};

class CliGenerateRejects : public CliGenerate, public ::testing::WithParamInterface<BadCase> {};

TEST_P(CliGenerateRejects, WithOneErrorLine) {
  const BadCase& c = GetParam();
  const std::string args =
      c.args[0] == '!' ? c.args.substr(1) : "generate -m " + plain() + " " + c.args;
  std::string with_text = args;
  const size_t pos = with_text.find("@TEXT@");
  if (pos != std::string::npos) with_text.replace(pos, 6, text());
  const CliResult r = run_forge(with_text);
  EXPECT_EQ(r.code, 1) << "forge " << with_text << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(c.mentions), std::string::npos) << r.err;
}

std::string many_ids(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(i % 200);
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Cli, CliGenerateRejects,
    ::testing::Values(
        BadCase{"IdOutsideVocab", "--prompt-ids 1,256", "vocab"},
        BadCase{"PromptLongerThanContext", "--prompt-ids " + many_ids(65), "context"},
        BadCase{"NegativeN", "--prompt-ids 1 -n -1", "max-tokens"},
        BadCase{"NegativeTemperature", "--prompt-ids 1 --temperature -0.5", "temperature"},
        BadCase{"NanTemperature", "--prompt-ids 1 --temperature nan", "temperature"},
        BadCase{"TopPZero", "--prompt-ids 1 --top-p 0", "top-p"},
        BadCase{"TopPAboveOne", "--prompt-ids 1 --top-p 1.5", "top-p"},
        BadCase{"NegativeTopK", "--prompt-ids 1 --top-k -1", "top-k"},
        BadCase{"ZeroRepeatPenalty", "--prompt-ids 1 --repeat-penalty 0", "repeat-penalty"},
        BadCase{"NegativeRepeatPenalty", "--prompt-ids 1 --repeat-penalty -2", "repeat-penalty"},
        BadCase{"MalformedIds", "--prompt-ids 1,x,3", "'x' is not a token id"},
        BadCase{"EmptyIdInList", "--prompt-ids 1,,3", "is not a token id"},
        BadCase{"NegativeId", "--prompt-ids -4", "not a token id"},
        BadCase{"HugeId", "--prompt-ids 99999999999", "not a token id"},
        BadCase{"EmptyIds", "--prompt-ids ''", "not a token id"},
        BadCase{"MissingFolder", "!generate -m /nonexistent/forge_model --prompt-ids 1",
                "/nonexistent/forge_model"},
        BadCase{"FolderWithoutModel", "!generate -m /tmp --prompt-ids 1", "config.json"},
        BadCase{"NeitherPromptNorIds", "-n 3", "exactly one of -p"},
        BadCase{"BothPromptAndIds", "!generate -m @TEXT@ -p hi --prompt-ids 1", "excludes"},
        BadCase{"TextPromptWithoutTokenizer", "-p hello", "tokenizer"},
        BadCase{"StopWithoutTokenizer", "--prompt-ids 1 --stop x", "tokenizer"},
        BadCase{"GreedyWithTemperature", "--prompt-ids 1 --greedy --temperature 0.5", "excludes"},
        BadCase{"MissingModelOption", "!generate --prompt-ids 1", "--model"},
        BadCase{"BadDevice", "--prompt-ids 1 --device tpu", "tpu"},
        BadCase{"BenchPresetTooLongForContext", "!bench --preset tiny", "context"},
        BadCase{"BenchUnknownPreset", "!bench --preset gpt5", "gpt5"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

}  // namespace
