// train_state.safetensors files written by older forge builds still resume. The fixture in
// tests/data/train_state_chunked/ was written by forge at commit 5ce4b92, whose models kept
// the wte as row chunks and named its tensors (and moments) "wte.weight.chunkN". It holds
// the state after 3 steps of a tiny model (and, in its metadata, the losses of steps 4-6 of
// the uninterrupted run under that build's dropout masks): resuming restores its weights
// and moments bit for bit, and training goes on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"
#include "forge/train.h"

namespace forge::test {
namespace {

std::string fixture_dir() {
  return std::string(FORGE_SOURCE_DIR) + "/tests/data/train_state_chunked";
}

gpt2::Config fixture_config() {
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.n_ctx = 8;
  c.vocab_size = 71;
  c.bos_id = c.eos_id = 70;
  c.validate();
  return c;
}

train::Hyper fixture_hyper() {
  train::Hyper h;
  h.steps = 6;
  h.batch = 2;
  h.micro_batch = 1;
  h.seq = 8;
  h.lr = 2e-3;
  h.warmup = 2;
  h.dropout = 0.1f;
  h.seed = 99;
  return h;
}

/// Step k's micro-batches: fixed pseudo-random token windows [1, 8].
std::vector<data::Batch> fixture_batches(int64_t k) {
  std::vector<data::Batch> out;
  for (int64_t m = 0; m < 2; ++m) {
    uint64_t s = 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(2 * k + m + 1);
    std::vector<uint32_t> seq;
    for (int t = 0; t <= 8; ++t) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      seq.push_back(static_cast<uint32_t>((s >> 33) % 71));
    }
    std::vector<uint32_t> in(seq.begin(), seq.end() - 1), tg(seq.begin() + 1, seq.end());
    out.push_back({Tensor::from_vector(in, {1, 8}), Tensor::from_vector(tg, {1, 8})});
  }
  return out;
}

// How the fixture was made: by TrainStateCompat.DISABLED_WriteChunkedFixture, run with
// FORGE_FIXTURE_OUT=DIR and --gtest_also_run_disabled_tests at the commit named above (the
// test is in this file up to commit 5c6c0a8; later builds cannot make chunked state: they
// have no ModelOptions::wte_chunk_rows). It trained a model of fixture_config() from
// Model::random(seed 8) with wte chunks of 30, 30 and 11 rows for 3 steps of
// fixture_hyper() on fixture_batches(0..2), saved the state, and stored the losses of steps
// 4-6 of an uninterrupted run in the metadata.

TEST(TrainStateCompat, ChunkedStateOfOlderBuildsResumes) {
  const std::string path = fixture_dir() + "/train_state.safetensors";
  const SafeTensorsFile f = SafeTensorsFile::open(path);
  // The fixture really is the old layout: chunked names, no plain "wte.weight".
  bool chunked = false;
  for (const std::string& n : f.names()) {
    chunked = chunked || n.find("wte.weight.chunk2") != std::string::npos;
    EXPECT_EQ(n.find("wte.weight") != std::string::npos && n.find(".chunk") == std::string::npos,
              false)
        << n;
  }
  ASSERT_TRUE(chunked);

  gpt2::Model model = gpt2::Model::random(fixture_config(), 1234);  // all overwritten
  train::Trainer trainer(model, fixture_hyper());
  const auto meta = trainer.load_state(path);
  ASSERT_EQ(trainer.step_count(), 3);
  // The weights are the file's, bit for bit: each parameter is a tensor of the file, or the
  // wte as one tensor where the file holds its row chunks.
  for (const ag::Parameter& p : trainer.params()) {
    std::vector<float> want;
    if (f.contains(p.name())) {
      want = f.load(p.name()).to_vector<float>();
    } else {
      ASSERT_EQ(p.name(), "wte.weight");
      for (int i = 0; f.contains("wte.weight.chunk" + std::to_string(i)); ++i) {
        const std::vector<float> c =
            f.load("wte.weight.chunk" + std::to_string(i)).to_vector<float>();
        want.insert(want.end(), c.begin(), c.end());
      }
    }
    const std::vector<float> got = p.value().to_vector<float>();
    ASSERT_EQ(got.size(), want.size()) << p.name();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << p.name();
  }
  // Saved again, the state holds the wte as one tensor, and every weight and AdamW moment is
  // the fixture's, bit for bit (the wte's and its moments' row chunks joined): the moments
  // were restored, not re-initialized.
  const std::string again =
      (std::filesystem::temp_directory_path() / "forge_compat_resaved.safetensors").string();
  trainer.save_state(again, {});
  const SafeTensorsFile g = SafeTensorsFile::open(again);
  EXPECT_TRUE(g.contains("wte.weight"));
  EXPECT_TRUE(g.contains("optim.exp_avg_sq.wte.weight"));
  for (const std::string& n : g.names()) {
    EXPECT_EQ(n.find(".chunk"), std::string::npos) << n;
    std::vector<float> want;
    if (f.contains(n)) {
      want = f.load(n).to_vector<float>();
    } else {
      for (int i = 0; f.contains(n + ".chunk" + std::to_string(i)); ++i) {
        const std::vector<float> c = f.load(n + ".chunk" + std::to_string(i)).to_vector<float>();
        want.insert(want.end(), c.begin(), c.end());
      }
    }
    const std::vector<float> got = g.load(n).to_vector<float>();
    ASSERT_EQ(got.size(), want.size()) << n;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << n;
  }
  std::filesystem::remove(again);
  // Steps 4-6 run on from there. Their losses are no longer compared with the fixture's
  // test.loss4-6: those were drawn when each micro-batch had dropout masks of its own seed;
  // masks are now keyed by each sequence's place in the step's batch, so micro-batch 1 draws
  // others (the continuation differed by ~1e-3 relative).
  for (int64_t k = 3; k < 6; ++k) {
    const double loss = trainer.step(fixture_batches(k)).loss;
    EXPECT_TRUE(std::isfinite(loss)) << "step " << k + 1;
  }
  EXPECT_EQ(trainer.step_count(), 6);
  EXPECT_TRUE(meta.count("test.loss4"));
}

}  // namespace
}  // namespace forge::test
