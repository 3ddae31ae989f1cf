// A safetensors file: header length, JSON header, dtypes, shapes, data offsets, and the
// loads that follow (F16/BF16 widening, zero-copy F32 views). SafeTensorsFile::open is what
// every model, checkpoint and --resume load goes through.
#include "forge/safetensors.h"
#include "harness_util.h"

using namespace forge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.safetensors", data, size);
  fuzz::expect_only_forge_errors([&] {
    const SafeTensorsFile file = SafeTensorsFile::open(path);
    for (const std::string& name : file.names()) {
      const TensorInfo& info = file.info(name);
      if (file.raw(name).size() != info.end - info.begin) fuzz::fail("raw size != end - begin");
      if (!info.loadable()) continue;
      const Tensor t = file.load(name);
      if (t.numel() != info.shape.numel()) fuzz::fail("loaded numel != the header's");
    }
  });
  return 0;
}
