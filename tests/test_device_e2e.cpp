// The backend-independent end-to-end tests, for every device of the registry (the CPU
// included, against itself: runs repeat bit for bit): greedy tokens three ways and
// gpt2::generate, eval loss, decode steps recorded once and replayed, reads that let the
// device run ahead, training steps with dropout, and, where the device counts its queue
// (device_stats), one submit per token and no allocation in the steady state. A new
// backend gets all of them by registering; its own specifics go in its tests folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "ci.h"
#include "device_test_util.h"
#include "forge/backend.h"
#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/forge.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/train.h"
#include "scoped_setting.h"

namespace forge {
// Test names and failure messages print a device as "name:0", not as its bytes.
static void PrintTo(const Device& d, std::ostream* os) { *os << d.str(); }
}  // namespace forge

namespace forge::test {
namespace {

class DeviceE2E : public ::testing::TestWithParam<Device> {};

std::vector<Device> e2e_devices() {
  std::vector<Device> out;
  for (const DeviceInfo& d : list_devices()) out.push_back(d.device);
  return out;
}

/// The golden model of tests/data/golden/odd (made with HF transformers) on `device`.
std::string golden_dir() { return std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/odd"; }
gpt2::Model golden_model(Device device) { return gpt2::Model::load(golden_dir(), device); }
const std::vector<uint32_t> kPrompt = {847, 641, 752, 387, 399};

/// greedy_logits with every step's ops called again (FORGE_DECODE_GRAPH=0: no replay).
std::vector<std::vector<float>> op_by_op_logits(const gpt2::Model& m, gpt2::KVCache& cache, int n) {
  DecodeGraphSwitch off(false);
  return greedy_logits(m, cache, kPrompt, n);
}

std::string e2e_name(const ::testing::TestParamInfo<Device>& info) {
  std::string s = info.param.str();
  std::replace(s.begin(), s.end(), ':', '_');
  return s;
}

TEST_P(DeviceE2E, Gpt2GreedyTokensAndEvalLossMatchTheCpu) {
  const Device dev = GetParam();
  const gpt2::Model cpu = golden_model(Device::cpu());
  const gpt2::Model gpu = golden_model(dev);
  ASSERT_EQ(gpu.device(), dev);
  const std::vector<uint32_t>& prompt = kPrompt;
  const std::vector<uint32_t> want = greedy_cached(cpu, prompt, 64);
  EXPECT_EQ(greedy_cached(gpu, prompt, 64), want);
  // Again, now that the pool holds every buffer size: where the device counts, one submit
  // per generated token (the prefill's included) and no device allocation at all (also
  // through a staging path, how discrete GPUs run: the token upload is recorded with
  // the step and the logits' copy-out joins it).
  const DeviceStats before = device_stats(dev);
  EXPECT_EQ(greedy_cached(gpu, prompt, 64), want);
  const DeviceStats after = device_stats(dev);
  if (before.counted) {
    EXPECT_EQ(after.submits - before.submits, 64u);
    EXPECT_EQ(after.allocations, before.allocations);
  }
  // gpt2::generate: greedy takes argmax_rows on the device (4 bytes read per token), with a
  // repetition penalty the host sampler reads the logits; both give the CPU's tokens.
  {
    gpt2::GenerateOptions g;
    g.max_new_tokens = 64;
    g.stop_at_eos = false;
    g.sampling.greedy = true;
    EXPECT_EQ(gpt2::generate(gpu, prompt, g).ids, want);
    // Again: one submit per token (the argmax joins the step's submit), no allocation.
    const DeviceStats before_gen = device_stats(dev);
    EXPECT_EQ(gpt2::generate(gpu, prompt, g).ids, want);
    const DeviceStats after_gen = device_stats(dev);
    if (before_gen.counted) {
      EXPECT_EQ(after_gen.submits - before_gen.submits, 64u);
      EXPECT_EQ(after_gen.allocations, before_gen.allocations);
    }
    g.sampling.repeat_penalty = 1.3f;
    const std::vector<uint32_t> penalized = gpt2::generate(cpu, prompt, g).ids;
    EXPECT_NE(penalized, want);
    EXPECT_EQ(gpt2::generate(gpu, prompt, g).ids, penalized);
  }

  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 90; ++i) ids.push_back((i * 389u + 11u) % 1003u);
  const double lc = gpt2::evaluate(cpu, ids).loss;
  const double lg = gpt2::evaluate(gpu, ids).loss;
  EXPECT_NEAR(lg, lc, 1e-5 * lc);

  // Again with the windowed kernels binding at most 300 rows of wte at once, where the
  // backend has windows (how GPT-2's 147 MiB wte runs on a device binding 128 MiB;
  // here the embedding, the LM head and the larger weight products all go in windows): the
  // same tokens.
  const std::string bytes = std::to_string(300 * gpu.config().n_embd * 4);
  const ScopedSetting window(dev, "window_bytes", bytes);
  if (!window.active()) return;
  const uint64_t dispatches = device_stats(dev).dispatches;
  const gpt2::Model windowed = golden_model(dev);
  EXPECT_EQ(greedy_cached(windowed, prompt, 64), want);
  EXPECT_GT(device_stats(dev).dispatches - dispatches, after.dispatches - before.dispatches)
      << "windows take more dispatches";
}

// Batch-1 decode steps on a device that can capture replay one recorded graph (the token
// and position written to the device before each replay): the same logits as recording
// every step op by op, one replay and one submit per token, a new graph when the weights'
// buffers change, and a bad token is still an error that leaves the cache as it was.
TEST_P(DeviceE2E, DecodeStepsReplayACapturedGraph) {
  const Device dev = GetParam();
  // Where the device cannot replay (the CPU), each step runs its ops again: the same logits.
  const bool replays = RecordedStep::replays_on(dev);
  const gpt2::Model gpu = golden_model(dev);
  const std::vector<uint32_t>& prompt = kPrompt;
  gpt2::KVCache cache(gpu, 1, 40);
  const std::vector<std::vector<float>> plain = op_by_op_logits(gpu, cache, 30);
  const DeviceStats before = device_stats(dev);
  const auto replayed = greedy_logits(gpu, cache, prompt, 30);
  const DeviceStats after = device_stats(dev);
  ASSERT_EQ(replayed.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i)
    expect_near(replayed[i], plain[i], 1e-5, "logits of step " + std::to_string(i));
  if (replays && before.counted) {
    EXPECT_EQ(after.replays - before.replays, 30u);
    EXPECT_EQ(after.submits - before.submits, 31u);  // the prefill's + one per step
  }
  // Again from the start: the same graph, the same logits; and once more without a single
  // new buffer (the steady state: the second prefill may still allocate what the graph
  // took from the pool for good).
  const auto replayed2 = greedy_logits(gpu, cache, prompt, 30);
  EXPECT_EQ(replayed2, replayed);
  const DeviceStats again = device_stats(dev);
  EXPECT_EQ(greedy_logits(gpu, cache, prompt, 30), replayed);
  if (replays && again.counted) {
    EXPECT_EQ(device_stats(dev).allocations, again.allocations);
    EXPECT_EQ(device_stats(dev).replays - again.replays, 30u);
  }

  // A bad token: an error naming it, the cache untouched; decoding goes on.
  const int64_t len = cache.length();
  EXPECT_THROW(gpu.forward_cached(Tensor::from_vector(std::vector<uint32_t>{1003}, {1, 1}), cache),
               Error);
  EXPECT_EQ(cache.length(), len);

  // Another model with the same cache: its own graph, its own logits.
  gpt2::Config c = gpu.config();
  const gpt2::Model other = gpt2::Model::random(c, 11, dev);
  std::vector<std::vector<float>> other_plain;
  {
    DecodeGraphSwitch off(false);
    other_plain = greedy_logits(other, cache, prompt, 8);
  }
  const auto other_replayed = greedy_logits(other, cache, prompt, 8);
  for (size_t i = 0; i < other_plain.size(); ++i)
    expect_near(other_replayed[i], other_plain[i], 1e-5, "other model, step " + std::to_string(i));
}

// The one decode path with sequences at their own positions in a shared cache, joining and
// leaving between steps: every sequence's logits as the CPU gives decoding it alone.
TEST_P(DeviceE2E, BatchedDecodeMatchesTheCpuDecodingAlone) {
  check_batch_decode(golden_model(GetParam()), golden_model(Device::cpu()), 1e-3);
}

// GPT-2 with its 2-D weights in each weight dtype (the random "tiny" model, width 64: whole
// q8_0 blocks): a prefill and 16 decode steps fed the CPU's greedy tokens give the CPU's logits
// in that dtype, within 1e-4 of their spread for 16-bit weights (the f32 sums in another
// order) and 2e-3 for blocks (an activation a rounding step away from the CPU's may round
// to the next int8). On a GPU that runs decode seams in one dispatch this is that kernel.
TEST_P(DeviceE2E, Gpt2InEveryWeightDtypeDecodesAsTheCpu) {
  const Device dev = GetParam();
  gpt2::Config c = gpt2::Config::preset("tiny");
  c.vocab_size = 1000;  // kPrompt's ids
  c.bos_id = c.eos_id = 999;
  const gpt2::Model cpu32 = gpt2::Model::random(c, 11);
  const gpt2::Model dev32 = gpt2::Model::random(c, 11, dev);
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(dtype_name(t));
    const gpt2::Model cm = cpu32.converted(t), dm = dev32.converted(t);
    gpt2::KVCache cc(cm, 1), dc(dm, 1);
    const std::vector<std::vector<float>> want = greedy_logits(cm, cc, kPrompt, 16);
    std::vector<uint32_t> fed;
    for (size_t i = 0; i + 1 < want.size(); ++i)
      fed.push_back(static_cast<uint32_t>(std::max_element(want[i].begin(), want[i].end()) -
                                          want[i].begin()));
    Tensor logits = dm.forward_cached(
        Tensor::from_vector(kPrompt, {1, static_cast<int64_t>(kPrompt.size())}), dc);
    for (size_t i = 0; i < want.size(); ++i) {
      const std::vector<float>& w = want[i];
      const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
      const double spread = *hi - *lo;
      const bool block = t == DType::Q8_0 || t == DType::Q4_0;
      expect_near(logits.to_vector<float>(), w, (block ? 2e-3 : 1e-4) * spread,
                  "step " + std::to_string(i));
      if (i < fed.size())
        logits = dm.forward_cached(Tensor::from_vector(std::vector<uint32_t>{fed[i]}, {1, 1}), dc);
    }
  }
}

// Reads that let the device run ahead: a read taken before later work sees the bytes as
// they were then, whichever ticket is waited for first; a ticket is good for one wait of
// its own size. The CPU's default reads at once and keeps the bytes.
TEST_P(DeviceE2E, ReadAsyncSeesTheBytesOfItsPlaceInTheQueue) {
  const Device dev = GetParam();
  for (const Device d : {Device::cpu(), dev}) {
    SCOPED_TRACE(d.str());
    Backend& be = backend_for(d);
    Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}).to(d);
    const size_t off = static_cast<size_t>(t.offset()) * sizeof(float);
    const uint64_t first = be.read_async(*t.storage(), off, 16);
    scale_(t, 2.0f);  // queued after the first read
    const uint64_t second = be.read_async(*t.storage(), off + 4, 8);
    t.copy_from(std::vector<float>{9, 9, 9, 9});
    std::vector<float> a(4), b(2);
    be.read_wait(second, b.data(), 8);
    be.read_wait(first, a.data(), 16);
    EXPECT_EQ(a, (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(b, (std::vector<float>{4, 6}));
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{9, 9, 9, 9}));
    EXPECT_THROW(be.read_wait(first, a.data(), 16), Error);  // used
    const uint64_t third = be.read_async(*t.storage(), off, 16);
    EXPECT_THROW(be.read_wait(third, a.data(), 8), Error);         // another size
    EXPECT_THROW(be.read_wait(third + 100, a.data(), 16), Error);  // never issued
  }
}

// Greedy decoding with the token fed back on the device (GreedyDecoder): the tokens of
// step-by-step argmax decoding; one replay and one submit per step (plus the one step queued
// past the last token wanted); no new buffer in the steady state; the cache ends at the
// tokens returned, and decoding on from there gives the step-by-step logits.
TEST_P(DeviceE2E, GreedyDecoderFeedsEachTokenToTheNextStep) {
  const Device dev = GetParam();
  const gpt2::Model gpu = golden_model(dev);
  const std::vector<uint32_t>& prompt = kPrompt;
  gpt2::KVCache cache(gpu, 1, 80);
  const std::vector<std::vector<float>> plain = op_by_op_logits(gpu, cache, 70);
  std::vector<uint32_t> want;
  for (const auto& row : plain)
    want.push_back(static_cast<uint32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
  want.pop_back();  // 70 tokens: the prefill's and 69 steps'

  const bool graphs = RecordedStep::replays_on(dev);
  const DeviceStats before = device_stats(dev);
  EXPECT_EQ(greedy_decoded(gpu, cache, prompt, 70), want);
  const DeviceStats after = device_stats(dev);
  if (graphs && before.counted) {
    // 69 steps and one more queued behind the last; the prefill's argmax read.
    EXPECT_EQ(after.replays - before.replays, 70u);
    EXPECT_EQ(after.submits - before.submits, 71u);
  }
  EXPECT_EQ(cache.length(), static_cast<int64_t>(prompt.size()) + 69);
  EXPECT_EQ(greedy_decoded(gpu, cache, prompt, 70), want);
  const DeviceStats again = device_stats(dev);
  EXPECT_EQ(greedy_decoded(gpu, cache, prompt, 70), want);
  if (again.counted) {
    EXPECT_EQ(device_stats(dev).allocations, again.allocations);
  }
  {
    DecodeGraphSwitch off(false);
    EXPECT_EQ(greedy_decoded(gpu, cache, prompt, 70), want);
  }

  // Stopped after 20 tokens: the cache holds the prompt and 19 steps; the step queued past
  // them left nothing behind that the next step would see.
  EXPECT_EQ(std::vector<uint32_t>(want.begin(), want.begin() + 20),
            greedy_decoded(gpu, cache, prompt, 20));
  EXPECT_EQ(cache.length(), static_cast<int64_t>(prompt.size()) + 19);

  // Bad input: errors naming the cause, before any work.
  gpt2::KVCache pair(gpu, 2, 8);
  EXPECT_THROW(gpt2::GreedyDecoder(gpu, pair, 1, 1), Error);      // batch 2
  EXPECT_THROW(gpt2::GreedyDecoder(gpu, cache, 1003, 1), Error);  // id >= V
  EXPECT_THROW(gpt2::GreedyDecoder(gpu, cache, 1, 57), Error);    // past capacity (56 left)
  EXPECT_THROW(gpt2::GreedyDecoder(gpu, cache, 1, -1), Error);    // negative
  if (!dev.is_cpu()) {
    const gpt2::Model cpu = golden_model(Device::cpu());
    EXPECT_THROW(gpt2::GreedyDecoder(cpu, cache, 1, 1), Error);  // the cache is elsewhere
  }
  EXPECT_EQ(cache.length(), static_cast<int64_t>(prompt.size()) + 19);

  {
    gpt2::GreedyDecoder one(gpu, cache, want[19], 1);
    EXPECT_EQ(one.next(), want[20]);
    EXPECT_THROW(one.next(), Error);  // its one step is done
  }
  const Tensor next =
      gpu.forward_cached(Tensor::from_vector(std::vector<uint32_t>{want[20]}, {1, 1}), cache);
  expect_near(next.to_vector<float>(), plain[21], 1e-4, "the step after the decoders'");
}

// 20 optimizer steps of a tiny model with dropout: the losses stay within 1e-4 relative of
// the CPU's (the dropout masks are bit-identical; only float summation order differs).
TEST_P(DeviceE2E, TrainingStepsMatchTheCpu) {
  const Device dev = GetParam();
  gpt2::Config c = gpt2::Config::preset("tiny");
  c.vocab_size = 97;
  c.bos_id = c.eos_id = 96;
  const TrainRun want = train_run(c, {}, 20);
  gpt2::ModelOptions o;
  o.device = dev;
  expect_same_training(train_run(c, o, 20), want, "tied wte");
  // Every binding of the windowed kernels at most 40 rows of wte (how a large vocabulary
  // fits the binding limit: the embedding, its scatter, the LM head and its two backward
  // products, AdamW and the norms over wte in 3 windows): the same run.
  {
    const ScopedSetting window(dev, "window_bytes", std::to_string(40 * 64 * 4));
    if (window.active())
      expect_same_training(train_run(c, o, 20), want, "wte in windows of 40 rows");
  }
  // An untied LM head.
  c.tie_word_embeddings = false;
  gpt2::ModelOptions untied = o;
  expect_same_training(train_run(c, untied, 5), train_run(c, {}, 5), "untied head");
}

INSTANTIATE_TEST_SUITE_P(EveryDevice, DeviceE2E, ::testing::ValuesIn(e2e_devices()), e2e_name);

}  // namespace
}  // namespace forge::test
