// The one-file tokenizer layouts, loaded as `forge tokenize --tokenizer FILE` does: HF's
// tokenizer.json (model.vocab, model.merges in either of its two spellings, added_tokens)
// for an input of even size, forge's character-level tokenizer_char.json for odd.
#include "forge/tokenizer.h"
#include "harness_util.h"
#include "tokenizer_checks.h"

using namespace forge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch(size % 2 == 0 ? "tokenizer.json" : "tokenizer_char.json", data, size);
  fuzz::expect_only_forge_errors([&] { fuzz::check_loaded_tokenizer(Tokenizer::load(path)); });
  return 0;
}
