// A sharded model's model.safetensors.index.json, opened as a model folder is: the index
// names shard files (plain names in the same folder), and every tensor it maps must be in
// the shard it names. The two shards beside it are valid and fixed (fuzz_safetensors fuzzes
// the shard format itself).
#include "forge/safetensors.h"
#include "harness_util.h"

using namespace forge;

namespace {

// The folder's fixed shards: model-00001-of-00002 holds "a" [2, 3] and "b" [4];
// model-00002-of-00002 holds "c" [3]. make_seeds.cpp writes the matching index.
const std::string& shard_folder() {
  static const std::string dir = [] {
    save_safetensors(fuzz::scratch_dir() + "/model-00001-of-00002.safetensors",
                     {{"a", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})},
                      {"b", Tensor::from_vector(std::vector<float>{7, 8, 9, 10}, {4})}});
    save_safetensors(fuzz::scratch_dir() + "/model-00002-of-00002.safetensors",
                     {{"c", Tensor::from_vector(std::vector<float>{11, 12, 13}, {3})}});
    return fuzz::scratch_dir();
  }();
  return dir;
}

}  // namespace

// Fixtures are made before the first input, outside its time limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shard_folder();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = shard_folder();
  fuzz::write_scratch("model.safetensors.index.json", data, size);
  fuzz::expect_only_forge_errors([&] {
    const TensorDirectory weights = TensorDirectory::open(dir);
    for (const std::string& name : weights.names()) {
      if (weights.load(name).numel() != weights.info(name).shape.numel())
        fuzz::fail("loaded numel != the header's");
    }
  });
  return 0;
}
