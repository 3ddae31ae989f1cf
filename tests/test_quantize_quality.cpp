// What rounding the weights costs a trained model: a small GPT-2 trained on real text (State
// of the Union addresses, scripts/fetch_corpus.sh) until its held-out loss is at least 3 nats
// below uniform, then written by `forge quantize` in every dtype and scored by `forge eval` on
// an address it never saw. Targets (relative to f32's held-out loss): f16 and bf16 within
// 0.1%, q8_0 within 0.5%, q4_0 within 5%. Each file's tensor table is checked too: every 2-D
// weight but the position embedding in the named dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ci.h"
#include "cli_runner.h"
#include "forge/gguf.h"
#include "gpt2_test_util.h"

namespace forge::test {
namespace {

namespace fs = std::filesystem;
using gpt2_tests::scratch;
const fs::path kCorpus = FORGE_SOURCE_DIR "/data/sotu";

double eval_loss(const std::string& model, const std::string& text) {
  const CliResult r = run_forge("eval -m " + model + " --text-file " + text + " --json");
  EXPECT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  return j.contains("loss") ? j.at("loss").get<double>() : NAN;
}

TEST(QuantizeQuality, HeldOutLossOfEveryDtypeStaysNearF32) {
  if (!fs::exists(kCorpus / "1950_harry_s_truman_d.txt")) {
    if (under_ci()) FAIL() << "the corpus is missing under CI (scripts/fetch_corpus.sh)";
    GTEST_SKIP() << "no corpus: run scripts/fetch_corpus.sh";
  }
  // Train on the addresses of 1900-1909 (~0.9 MB), hold out 1950's.
  const fs::path data = scratch("quality_data"), out = scratch("quality_model");
  fs::create_directories(data);
  for (const auto& e : fs::directory_iterator(kCorpus))
    if (e.path().filename().string().rfind("190", 0) == 0) fs::copy_file(e.path(), data / e.path().filename());
  const std::string held_out = (kCorpus / "1950_harry_s_truman_d.txt").string();
  const CliResult t = run_forge("train --data " + data.string() + " --out " + out.string() +
                                " --layers 2 --heads 2 --embd 64 --ctx 64 -b 8 --steps 150"
                                " --lr 3e-3 --warmup 20 --eval-every 0 --sample-every 0"
                                " --save-every 0 --json");
  ASSERT_EQ(t.code, 0) << t.err;
  const double f32 = eval_loss(out.string(), held_out);
  const double uniform = std::log(50257.0);
  ASSERT_LE(f32, uniform - 3.0) << "the model did not learn enough for the comparison to mean much";
  struct Target {
    const char* type;
    double rel;
  };
  for (const Target& tg : {Target{"f32", 1e-9}, Target{"f16", 1e-3}, Target{"bf16", 1e-3},
                           Target{"q8_0", 5e-3}, Target{"q4_0", 5e-2}}) {
    SCOPED_TRACE(tg.type);
    const std::string file = scratch(std::string("quality_") + tg.type + ".gguf");
    const CliResult q = run_forge("quantize -m " + out.string() + " -o " + file + " --type " + tg.type);
    ASSERT_EQ(q.code, 0) << q.err;
    const gguf::File f = gguf::File::open(file);
    for (const gguf::TensorEntry& e : f.tensors()) {
      const bool weight = e.ne.size() == 2 && e.name != "position_embd.weight";
      EXPECT_EQ(dtype_name(*e.dtype), std::string(weight ? tg.type : "f32")) << e.name;
    }
    const double loss = eval_loss(file, held_out);
    std::printf("held-out loss %s: %.6f (f32 %.6f, %+.4f%%)\n", tg.type, loss, f32,
                100.0 * (loss - f32) / f32);
    EXPECT_LE(std::fabs(loss - f32), tg.rel * f32) << "held-out loss " << loss << " vs f32 " << f32;
  }
}

}  // namespace
}  // namespace forge::test
