// Training-step benchmark: one train::Trainer::step (forward + backward + clip + AdamW) of
// GPT-2 124M shapes (random weights) at B = 4, T = 64 — llm.c's CPU default — plus the
// "tiny"/"mini" presets for quick runs. Reported: seconds per step and tokens per second.
//
//   build/forge_microbench --benchmark_filter=Train --benchmark_min_time=1x
//   FORGE_NUM_THREADS=2 (default: all hardware threads)
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "forge/gpt2.h"
#include "forge/train.h"

namespace {

using namespace forge;

data::Batch random_batch(int64_t B, int64_t T, int64_t V, uint64_t k) {
  std::vector<uint32_t> in(static_cast<size_t>(B * T)), tg(in.size());
  uint64_t s = 0x9E3779B97F4A7C15ULL * (k + 1);
  for (size_t i = 0; i < in.size(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    in[i] = static_cast<uint32_t>((s >> 33) % static_cast<uint64_t>(V));
    tg[i] = static_cast<uint32_t>((s >> 13) % static_cast<uint64_t>(V));
  }
  return {Tensor::from_vector(in, {B, T}), Tensor::from_vector(tg, {B, T})};
}

void BM_TrainStep(benchmark::State& state, const std::string& preset) {
  const int64_t B = state.range(0), T = state.range(1);
  gpt2::Model model = gpt2::Model::random(gpt2::Config::preset(preset), 1);
  train::Hyper h;
  h.batch = B;
  h.seq = T;
  h.steps = 1000000;
  train::Trainer trainer(model, h);
  const data::Batch b = random_batch(B, T, model.config().vocab_size, 0);
  trainer.step({b});  // warm-up: first-touch of gradient and moment buffers
  double loss = 0;
  for (auto _ : state) loss = trainer.step({b}).loss;
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(B * T), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["loss"] = loss;
}

BENCHMARK_CAPTURE(BM_TrainStep, tiny, std::string("tiny"))
    ->Args({8, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, mini, std::string("mini"))
    ->Args({4, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, gpt2, std::string("gpt2"))
    ->Args({4, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
