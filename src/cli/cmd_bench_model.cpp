// forge bench --preset — placeholder until the GPT-2 model lands.
#include "cli/commands.h"
#include "forge/error.h"

namespace forge::cli {

int bench_model(const ModelBenchOptions&) {
  throw Error(ErrorKind::Unsupported, "bench --preset: not available in this build yet");
}

}  // namespace forge::cli
