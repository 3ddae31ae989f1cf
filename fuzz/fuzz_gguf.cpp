// A GGUF file, read as `forge generate -m FILE.gguf` reads it: gguf::File::open (header,
// metadata of every value type, tensor entries, alignment, data ranges), every tensor's
// load, the tokenizer in its metadata (Tokenizer::from_gguf), and gpt2::Model::load, whose
// config comes from the metadata and must be refused when the tensors do not back it.
#include "forge/gguf.h"
#include "forge/gpt2.h"
#include "forge/tokenizer.h"
#include "harness_util.h"
#include "tokenizer_checks.h"

using namespace forge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.gguf", data, size);
  bool opened = false;
  fuzz::expect_only_forge_errors([&] {
    const gguf::File file = gguf::File::open(path);
    opened = true;
    for (const gguf::TensorEntry& entry : file.tensors()) {
      if (file.raw(entry.name).empty()) fuzz::fail("a tensor without bytes");
      if (entry.loadable()) file.load(entry.name);
    }
  });
  if (!opened) return 0;
  fuzz::expect_only_forge_errors([&] { fuzz::check_loaded_tokenizer(Tokenizer::from_gguf(path)); });
  fuzz::expect_only_forge_errors([&] {
    const gpt2::Model model = gpt2::Model::load(path);
    gpt2::evaluate(model, std::vector<uint32_t>{1, 2, 3});
  });
  return 0;
}
