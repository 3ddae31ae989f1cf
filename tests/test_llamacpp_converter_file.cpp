// A GGUF file written by llama.cpp's own converter, committed as a fixture
// (tests/data/llamacpp/f16_50257.q8_0.gguf, made by tools/llamacpp/convert_with_llamacpp.sh:
// convert_hf_to_gguf.py --outtype q8_0 of the HF golden model tests/data/golden/f16_50257).
// forge reads its metadata, tensor names and tokenizer; every tensor the converter stored in
// q8_0 holds exactly the bytes of forge's own q8_0 conversion of the HF weights (both follow
// ggml's reference rounding), the others the HF values; its logits follow HF's within
// q8_0's rounding, and equal those of forge's own q8_0 model where the dtypes agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ci.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"
#include "forge/tokenizer.h"

namespace forge::test {
namespace {

namespace fs = std::filesystem;
const std::string kFile = FORGE_SOURCE_DIR "/tests/data/llamacpp/f16_50257.q8_0.gguf";
const std::string kHfDir = FORGE_SOURCE_DIR "/tests/data/golden/f16_50257";
const std::string kTokDir = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";

std::vector<float> logits_of(const gpt2::Model& m, const std::vector<uint32_t>& ids) {
  return m.forward(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}))
      .to_vector<float>();
}

TEST(LlamaCppConverterFile, ReadsAsForgesOwnQ8_0OfTheSameModel) {
  ASSERT_TRUE(fs::exists(kFile)) << kFile;
  const gpt2::Model m = gpt2::Model::load(kFile);
  const gpt2::Model hf = gpt2::Model::load(kHfDir).widened();
  EXPECT_EQ(m.config().n_layer, hf.config().n_layer);
  EXPECT_EQ(m.config().n_head, hf.config().n_head);
  EXPECT_EQ(m.config().n_embd, hf.config().n_embd);
  EXPECT_EQ(m.config().n_ctx, hf.config().n_ctx);
  EXPECT_EQ(m.config().vocab_size, hf.config().vocab_size);
  // Each tensor: q8_0 ones against forge's q8_0 of the HF weights, byte for byte; the others
  // (the converter keeps some in f32 or f16) against the HF values.
  const gpt2::Model own = hf.converted(DType::Q8_0);
  const auto got = m.named_weights(), mine = own.named_weights(), src = hf.named_weights();
  const auto wide = m.widened().named_weights();  // every tensor as f32, forge's f32 layout
  ASSERT_EQ(got.size(), mine.size());
  int q8 = 0;
  bool same_dtypes = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& [name, t] = got[i];
    SCOPED_TRACE(name + " (" + dtype_name(t.dtype()) + " in the file)");
    same_dtypes &= t.dtype() == mine[i].second.dtype();
    if (t.dtype() == DType::Q8_0) {
      ++q8;
      ASSERT_EQ(mine[i].second.dtype(), DType::Q8_0);
      ASSERT_EQ(t.shape(), mine[i].second.shape());
      const std::vector<uint8_t> a = t.to_bytes(), b = mine[i].second.to_bytes();
      size_t differ = 0;
      for (size_t k = 0; k < a.size(); ++k) differ += a[k] != b[k];
      EXPECT_EQ(differ, 0u) << "bytes that differ from forge's q8_0, of " << a.size();
    } else {
      // f32 or f16: the HF value (f16 in the HF file, so exact in either).
      ASSERT_EQ(wide[i].second.shape(), src[i].second.shape());
      EXPECT_EQ(wide[i].second.to_vector<float>(), src[i].second.to_vector<float>());
    }
  }
  EXPECT_GT(q8, 0) << "the converter stored no tensor in q8_0";
  // The last row of the golden prompt's logits (HF: f16 weights, f32 compute; stored whole
  // in golden.safetensors) within q8_0's rounding of weights and activations; forge's own
  // q8_0 model's exactly where every dtype agrees (the same bytes through the same kernels).
  std::ifstream f(kHfDir + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(f);
  const std::vector<uint32_t> ids = golden["prompt_ids"][0].get<std::vector<uint32_t>>();
  const std::vector<float> want = SafeTensorsFile::open(kHfDir + "/golden.safetensors")
                                      .load("prompt_last_row")
                                      .to_vector<float>();
  const std::vector<float> all = logits_of(m, ids);
  ASSERT_EQ(all.size(), ids.size() * want.size());
  const std::vector<float> l(all.end() - static_cast<std::ptrdiff_t>(want.size()), all.end());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(l[i]) - want[i]));
  }
  EXPECT_LE(worst, 0.03 * scale) << "logits up to " << scale;
  if (same_dtypes) {
    EXPECT_EQ(all, logits_of(own, ids));
  }
}

// The tokenizer the converter stored (tokenizer.ggml.*) is GPT-2's: the same vocabulary,
// merges and special token as forge's from the BPE files.
TEST(LlamaCppConverterFile, CarriesGpt2sTokenizer) {
  if (!fs::exists(kTokDir + "/encoder.json"))
    FORGE_SKIP_UNLESS_CI("GPT-2 tokenizer files missing; run scripts/fetch_tokenizer.sh");
  const Tokenizer fromfile = Tokenizer::load(kFile), bpe = Tokenizer::load(kTokDir);
  EXPECT_EQ(fromfile.fingerprint(), bpe.fingerprint());
  for (const char* text :
       {"Hello, my dog is cute", "hello world", " caf\xc3\xa9  \n\tx<|endoftext|>"})
    EXPECT_EQ(fromfile.encode(text), bpe.encode(text)) << text;
}

}  // namespace
}  // namespace forge::test
