// train_state.safetensors as `forge train --resume` reads it: Trainer::load_state into a
// trainer of small_model_config(). Besides the safetensors layer (fuzz_safetensors), this
// reaches the forge.* metadata (step counts, the hyper and config JSON, the format version)
// and the checks of every weight and moment against the model.
#include "forge/train.h"
#include "harness_util.h"

using namespace forge;

namespace {

train::Trainer& trainer() {
  static gpt2::Model model = gpt2::Model::random(fuzz::small_model_config(), 1);
  static train::Trainer t = [] {
    train::Hyper hyper;
    hyper.steps = 10;
    hyper.batch = 1;
    hyper.seq = 8;
    return train::Trainer(model, hyper);
  }();
  return t;
}

}  // namespace

// Fixtures are made before the first input, outside its time limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  trainer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  train::Trainer& t = trainer();
  const std::string path = fuzz::write_scratch("train_state.safetensors", data, size);
  fuzz::expect_only_forge_errors([&] { t.load_state(path); });
  return 0;
}
