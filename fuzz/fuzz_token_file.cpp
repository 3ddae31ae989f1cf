// A token file (llm.c's shard layout: a 1024-byte header of 256 int32, magic 20240520,
// version 1 = u16 tokens or 2 = u32, count; then the tokens), read as `forge train --data
// FILE` reads it: data::load. Ids that read must write back and read again unchanged.
#include "forge/data.h"
#include "harness_util.h"

using namespace forge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("tokens.bin", data, size);
  fuzz::expect_only_forge_errors([&] { data::read_token_file(path); });
  if (!data::is_token_file(path)) return 0;  // forge train would take it as text
  fuzz::expect_only_forge_errors([&] {
    data::DataOptions options;
    options.path = path;
    const data::Dataset set = data::load(options);
    const std::vector<uint32_t> ids = data::read_token_file(path);
    if (set.train.size() + set.val.size() != ids.size()) fuzz::fail("split sizes != token count");
    const std::string again = fuzz::scratch_dir() + "/again.bin";
    data::write_token_file(again, ids);
    if (data::read_token_file(again) != ids) fuzz::fail("a token file's round trip changed it");
  });
  return 0;
}
