// GPT-2 in other weight dtypes and in GGUF files: a model converted to f16 / bf16 / q8_0 /
// q4_0 keeps those dtypes in memory and runs; written as GGUF (llama.cpp's names) it reads
// back to the same weights and the same logits; the tokenizer travels in the metadata; bad
// files are refused with the reason; `forge quantize` writes files that generate and eval
// take.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_runner.h"
#include "forge/gguf.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "forge/tokenizer.h"
#include "gpt2_test_util.h"

namespace forge::test {
namespace {

namespace fs = std::filesystem;
using gpt2_tests::random_ids;
using gpt2_tests::scratch;
const std::string kTokDir = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";
constexpr DType kDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

// One layer of 64 (two heads), GPT-2's vocabulary: the real tokenizer fits it.
gpt2::Config small_config() {
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.n_ctx = 64;
  c.vocab_size = 50257;
  return c;
}

std::vector<float> logits_of(const gpt2::Model& m, const std::vector<uint32_t>& ids) {
  return m.forward(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}))
      .to_vector<float>();
}

TEST(Gpt2Gguf, ConvertedModelsKeepTheirDtypeAndStayCloseToF32) {
  const gpt2::Model f32 = gpt2::Model::random(small_config(), 3);
  const std::vector<uint32_t> ids = random_ids(20, 50257, 1);
  const std::vector<float> want = logits_of(f32, ids);
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (DType t : kDTypes) {
    const gpt2::Model m = f32.converted(t);
    EXPECT_EQ(m.weight_dtype(), t);
    EXPECT_EQ(m.weights().wte.dtype(), t);
    EXPECT_EQ(m.weights().wpe.dtype(), DType::F32);
    EXPECT_EQ(m.weights().layers[0].ln_1_w.dtype(), DType::F32);
    EXPECT_EQ(m.weights().layers[0].fc_b.dtype(), DType::F32);
    // Linear weights of other dtypes are [out, in].
    EXPECT_EQ(m.weights().layers[0].fc_w.shape(),
              t == DType::F32 ? Shape({64, 256}) : Shape({256, 64}));
    const double bytes = static_cast<double>(m.weight_bytes());
    const double per = t == DType::F32    ? 4
                       : t == DType::Q8_0 ? 34.0 / 32
                       : t == DType::Q4_0 ? 18.0 / 32
                                          : 2;
    // All 2-D weights but wpe in the dtype; wpe and the 1-D ones f32.
    const double want_bytes =
        per * (50257.0 * 64 + 2 * 12.0 * 64 * 64) + 4.0 * (64 * 64 + 2 * 13 * 64 + 2 * 64);
    EXPECT_NEAR(bytes, want_bytes, 1e-6 * want_bytes) << dtype_name(t);
    // Logits: the rounding of the weights (and, for blocks, of the activations) moves them a
    // little, far less than their spread.
    const std::vector<float> got = logits_of(m, ids);
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    const double bound = t == DType::F32    ? 0
                         : t == DType::Q4_0 ? 0.25
                         : t == DType::Q8_0 ? 0.03
                                            : 0.02;
    EXPECT_LE(diff, bound * scale) << dtype_name(t) << ": logits up to " << scale;
    // Back to f32: f16/bf16 widen exactly, so a second round trip changes nothing.
    if (t == DType::F16 || t == DType::BF16) {
      const gpt2::Model back = m.widened();
      EXPECT_EQ(back.weight_dtype(), DType::F32);
      EXPECT_EQ(logits_of(back.converted(t), ids), got);
    }
  }
}

// Greedy continuation by full forwards; gaps[i]: the top-2 logit gap at step i.
std::vector<uint32_t> greedy(const gpt2::Model& m, std::vector<uint32_t> ids, int n,
                             std::vector<float>* gaps = nullptr) {
  std::vector<uint32_t> out;
  const size_t V = static_cast<size_t>(m.config().vocab_size);
  for (int i = 0; i < n; ++i) {
    const std::vector<float> all = logits_of(m, ids);
    std::vector<float> l(all.end() - static_cast<std::ptrdiff_t>(V), all.end());
    const auto best = static_cast<uint32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    if (gaps) {
      const float top = l[best];
      l[best] = -INFINITY;
      gaps->push_back(top - *std::max_element(l.begin(), l.end()));
    }
    out.push_back(best);
    ids.push_back(best);
  }
  return out;
}

// HF's golden models (tests/data/golden): f16 weights give f32's greedy tokens. q8_0 (for the
// model whose width is whole blocks) is compared too; where its tokens part from f32's, the
// test says where and checks why: the f32 top-2 gap there is within what q8_0's rounding of
// weights and activations can move a logit.
TEST(Gpt2Gguf, GoldenModelsGreedyInF16EqualsF32) {
  for (const char* name : {"odd", "f16_50257", "noprefix_bf16", "untied"}) {
    SCOPED_TRACE(name);
    const std::string dir = std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/" + name;
    const gpt2::Model f32 = gpt2::Model::load(dir).widened();
    const std::vector<uint32_t> prompt = random_ids(5, f32.config().vocab_size, 9);
    std::vector<float> gaps;
    const std::vector<uint32_t> want = greedy(f32, prompt, 40, &gaps);
    EXPECT_EQ(greedy(f32.converted(DType::F16), prompt, 40), want);
    if (f32.config().n_embd % 32 != 0) continue;
    const std::vector<uint32_t> q8 = greedy(f32.converted(DType::Q8_0), prompt, 40);
    const auto diff = std::mismatch(q8.begin(), q8.end(), want.begin());
    if (diff.first == q8.end()) continue;
    const size_t at = static_cast<size_t>(diff.first - q8.begin());
    std::printf("%s: q8_0's greedy tokens part from f32's at step %zu (f32 top-2 gap %.4f)\n",
                name, at, gaps[at]);
    EXPECT_LT(gaps[at], 0.05f) << "q8_0 differs at step " << at << " where f32's choice is clear";
  }
}

TEST(Gpt2Gguf, FilesRoundTripWeightsLogitsAndTokenizer) {
  const gpt2::Model f32 = gpt2::Model::random(small_config(), 4);
  const Tokenizer tok = Tokenizer::load(kTokDir);
  const std::vector<uint32_t> ids = random_ids(12, 50257, 2);
  for (DType t : kDTypes) {
    const gpt2::Model m = f32.converted(t);
    const std::string path = scratch(std::string("rt_") + dtype_name(t) + ".gguf");
    m.save_gguf(path, tok, "test");
    const gguf::File f = gguf::File::open(path);
    EXPECT_EQ(f.get_string("general.architecture"), "gpt2");
    EXPECT_EQ(f.get_u64("gpt2.block_count"), 2u);
    EXPECT_EQ(f.get_u64("gpt2.embedding_length"), 64u);
    EXPECT_EQ(f.get_u64("gpt2.feed_forward_length"), 256u);
    // Every 2-D weight but the position embedding in the named dtype, llama.cpp's names.
    for (const gguf::TensorEntry& e : f.tensors()) {
      const bool two_d = e.ne.size() == 2 && e.name != "position_embd.weight";
      EXPECT_EQ(*e.dtype, two_d ? t : DType::F32) << e.name;
    }
    ASSERT_NE(f.tensor("blk.1.ffn_down.weight"), nullptr);
    EXPECT_EQ(f.tensor("blk.1.ffn_down.weight")->ne, (std::vector<uint64_t>{256, 64}));  // in, out
    const gpt2::Model back = gpt2::Model::load(path);
    EXPECT_EQ(back.config(), m.config());
    const auto a = m.named_weights(), b = back.named_weights();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
      EXPECT_EQ(a[i].second.to_bytes(), b[i].second.to_bytes()) << a[i].first;
    }
    EXPECT_EQ(logits_of(back, ids), logits_of(m, ids)) << dtype_name(t);
    const Tokenizer tb = Tokenizer::load(path);
    EXPECT_EQ(tb.fingerprint(), tok.fingerprint());
    EXPECT_EQ(tb.encode("Hello, my dog is cute"),
              (std::vector<uint32_t>{15496, 11, 616, 3290, 318, 13779}));
  }
}

// A GGUF written by an independent writer (tools/llamacpp/make_test_gguf.py, Python stdlib):
// forge reads its config, tokenizer and weights.
TEST(Gpt2Gguf, ReadsAFileOfAnIndependentWriter) {
  const std::string path = scratch("py_tiny.gguf");
  const std::string cmd = "/usr/bin/python3 " FORGE_SOURCE_DIR
                          "/tools/llamacpp/make_test_gguf.py --preset tiny --dtype f16 --out " +
                          path + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const gpt2::Model m = gpt2::Model::load(path);
  EXPECT_EQ(m.config().n_layer, 2);
  EXPECT_EQ(m.config().n_embd, 64);
  EXPECT_EQ(m.config().vocab_size, 50257);
  EXPECT_EQ(m.weight_dtype(), DType::F16);
  EXPECT_EQ(Tokenizer::load(path).fingerprint(), Tokenizer::load(kTokDir).fingerprint());
  const std::vector<float> l = logits_of(m, {15496, 11, 616});
  for (float v : l) ASSERT_TRUE(std::isfinite(v));
}

// Writes `meta` + `tensors` and expects Model::load to refuse with `kind` and `needle`.
void expect_refused(const gguf::Metadata& meta, const gguf::NamedTensors& tensors, ErrorKind kind,
                    const std::string& needle) {
  const std::string path = scratch("bad.gguf");
  gguf::save(path, meta, tensors);
  try {
    (void)gpt2::Model::load(path);
    ADD_FAILURE() << "no error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("gpt2::Model::load: ", 0), 0u) << e.what();
  }
}

// Tokenizer::available decides whether `generate -m FILE.gguf -p TEXT` (and the page) read a
// tokenizer from the model itself.
TEST(Gpt2Gguf, TokenizerAvailableSaysWhetherAFileOrFolderHoldsOne) {
  const gpt2::Model m = gpt2::Model::random(small_config(), 6);
  const std::string with = scratch("with_tok.gguf"), without = scratch("without_tok.gguf");
  m.save_gguf(with, Tokenizer::load(kTokDir), "x");
  m.save_gguf(without, Tokenizer(), "x");
  EXPECT_TRUE(Tokenizer::available(with));
  EXPECT_EQ(Tokenizer::load(with).encode("Hello world"), Tokenizer::load(kTokDir).encode("Hello world"));
  EXPECT_FALSE(Tokenizer::available(without));
  const std::string garbage = scratch("garbage.gguf");
  std::ofstream(garbage) << "GGUF but not really";
  EXPECT_FALSE(Tokenizer::available(garbage));
  EXPECT_TRUE(Tokenizer::available(kTokDir));
  const fs::path half = scratch("half_tokenizer");
  fs::create_directories(half);
  fs::copy_file(fs::path(kTokDir) / "encoder.json", half / "encoder.json",
                fs::copy_options::overwrite_existing);
  EXPECT_FALSE(Tokenizer::available(half.string()));  // vocab.bpe is missing
  EXPECT_FALSE(Tokenizer::available(kTokDir + "/encoder.json"));
  EXPECT_FALSE(Tokenizer::available(scratch("no_such_thing")));
}

TEST(Gpt2Gguf, RefusesFilesThatAreNotAGpt2TheMetadataDescribes) {
  const std::string good = scratch("good.gguf");
  gpt2::Model::random(small_config(), 5).converted(DType::Q8_0).save_gguf(good, Tokenizer(), "x");
  const gguf::File f = gguf::File::open(good);
  gguf::NamedTensors tensors;
  for (const gguf::TensorEntry& e : f.tensors()) tensors.emplace_back(e.name, f.load(e.name));
  auto with = [&](const std::string& key, gguf::Value v) {
    gguf::Metadata m = f.metadata();
    for (auto& [k, val] : m)
      if (k == key) val = v;
    return m;
  };
  auto without = [&](const std::string& key) {
    gguf::Metadata m;
    for (const auto& kv : f.metadata())
      if (kv.first != key) m.push_back(kv);
    return m;
  };
  expect_refused(with("general.architecture", gguf::Value::string("llama")), tensors,
                 ErrorKind::Unsupported, "architecture \"llama\"");
  expect_refused(without("gpt2.block_count"), tensors, ErrorKind::Format, "gpt2.block_count");
  expect_refused(
      with("gpt2.context_length", gguf::Value::u32(32)), tensors, ErrorKind::Format,
      "tensor \"position_embd.weight\" has shape [64, 64], the metadata implies [32, 64]");
  expect_refused(with("gpt2.block_count", gguf::Value::u32(1)), tensors, ErrorKind::Format,
                 "unexpected tensor \"blk.1.");
  expect_refused(with("gpt2.feed_forward_length", gguf::Value::u32(100)), tensors,
                 ErrorKind::Unsupported, "feed_forward_length");
  gguf::NamedTensors missing(tensors.begin(), tensors.end() - 1);  // output_norm.bias
  expect_refused(f.metadata(), missing, ErrorKind::Format, "missing tensor \"output_norm.bias\"");
}

TEST(Gpt2Gguf, QuantizeWritesFilesThatGenerateAndEvalTake) {
  const std::string dir = scratch("quantize_src");
  gpt2::Model::random(small_config(), 6).save(dir);
  Tokenizer::load(kTokDir).save(dir);
  const std::string ids = "--ids 15496,11,616,3290,318,13779";
  const CliResult ref = run_forge("eval -m " + dir + " " + ids + " --json");
  ASSERT_EQ(ref.code, 0) << ref.err;
  for (const char* type : {"f16", "q8_0", "q4_0"}) {
    const std::string out = scratch(std::string("q_") + type + ".gguf");
    const CliResult q = run_forge("quantize -m " + dir + " -o " + out + " --type " + type);
    ASSERT_EQ(q.code, 0) << q.err;
    EXPECT_NE(q.out.find(type), std::string::npos) << q.out;
    const CliResult g = run_forge("generate -m " + out + " --prompt-ids 15496,11,616 -n 4");
    EXPECT_EQ(g.code, 0) << g.err;
    // forge bench times the file as it is: its weights' dtype and size, close to the file's.
    const CliResult b = run_forge("bench --model " + out +
                                  " --prompt-tokens 8 --decode-tokens 4 --train-steps 0 --json");
    ASSERT_EQ(b.code, 0) << b.err;
    const nlohmann::json bj = parse_json(b);
    EXPECT_EQ(bj.at("weights_dtype"), type);
    uint64_t tensor_bytes = 0;
    const gguf::File file = gguf::File::open(out);  // alive while its entries are read
    for (const gguf::TensorEntry& te : file.tensors()) tensor_bytes += te.bytes;
    EXPECT_NEAR(bj.at("weights_mb").get<double>() * 1048576.0, static_cast<double>(tensor_bytes),
                1e-3 * static_cast<double>(tensor_bytes));
    const CliResult e = run_forge("eval -m " + out + " " + ids + " --json");
    ASSERT_EQ(e.code, 0) << e.err;
    // A random model's loss is ~log(50257); rounding moves it a little.
    const double l0 = std::stod(ref.out.substr(ref.out.find("\"loss\":") + 7));
    const double l1 = std::stod(e.out.substr(e.out.find("\"loss\":") + 7));
    EXPECT_NEAR(l1, l0, 0.05 * l0) << type;
  }
  for (const char* bad :
       {"--type q5_1", "--type q8_0 -o /nonexistent_dir/x.gguf", "--type q8_0 -o notgguf.bin"}) {
    const std::string args =
        std::string("quantize -m ") + dir +
        (std::string(bad).find(" -o ") == std::string::npos ? " -o " + scratch("z.gguf") + " "
                                                            : " ") +
        bad;
    const CliResult r = run_forge(args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace forge::test
