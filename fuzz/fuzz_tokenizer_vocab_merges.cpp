// The two-file BPE layouts, loaded from a folder as `forge tokenize --tokenizer DIR` does:
// HF's vocab.json + merges.txt and OpenAI's encoder.json + vocab.bpe (the same formats under
// other names; an input of even size goes to the first, odd to the second). The input is
// the vocabulary JSON, a separator line (harness_util.h), then the merges.
#include <filesystem>

#include "forge/tokenizer.h"
#include "harness_util.h"
#include "tokenizer_checks.h"

using namespace forge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool made = std::filesystem::create_directories(fuzz::scratch_dir() + "/hf") &&
                           std::filesystem::create_directories(fuzz::scratch_dir() + "/openai");
  (void)made;
  const auto parts = fuzz::split_parts(data, size, 2);
  const bool hf = size % 2 == 0;
  const std::string dir = hf ? "hf" : "openai";
  fuzz::write_scratch(dir + (hf ? "/vocab.json" : "/encoder.json"), parts[0]);
  fuzz::write_scratch(dir + (hf ? "/merges.txt" : "/vocab.bpe"), parts[1]);
  fuzz::expect_only_forge_errors(
      [&] { fuzz::check_loaded_tokenizer(Tokenizer::load(fuzz::scratch_dir() + "/" + dir)); });
  return 0;
}
