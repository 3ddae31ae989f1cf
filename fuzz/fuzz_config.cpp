// config.json, read as `forge generate -m DIR` reads it: Config::from_json, then
// gpt2::Model::load of a folder whose model.safetensors holds the weights of
// small_model_config(). A config that asks for more than those few KiB of weights (n_embd =
// 10^9, n_layer = 10^6) must be refused from the weights' shapes, before anything of its
// size is allocated. A config that loads must survive its own round trip through to_json.
#include "forge/gpt2.h"
#include "harness_util.h"

using namespace forge;

namespace {

const std::string& model_folder() {
  static const std::string dir = [] {
    gpt2::Model::random(fuzz::small_model_config(), 1).save(fuzz::scratch_dir());
    return fuzz::scratch_dir();
  }();
  return dir;
}

}  // namespace

// Fixtures are made before the first input, outside its time limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  model_folder();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = model_folder();
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::write_scratch("config.json", text);
  fuzz::expect_only_forge_errors([&] {
    const gpt2::Config config = gpt2::Config::from_json(text);
    if (gpt2::Config::from_json(config.to_json()) != config)
      fuzz::fail("Config::from_json(to_json()) changed the config");
  });
  fuzz::expect_only_forge_errors([&] {
    const gpt2::Model model = gpt2::Model::load(dir);
    const std::vector<uint32_t> ids = {1, 2, 3};
    gpt2::evaluate(model, ids);
  });
  return 0;
}
