// forge bench --preset NAME: times a random-init GPT-2 of the preset's shapes.
//
//   prefill: a forward pass of B x P random prompt tokens into a KV cache (one warm-up,
//            then the median of 3 timed passes);
//   decode:  N KV-cache steps of B x 1 tokens after a prefill, each fed the argmax of the
//            previous logits (greedy decoding), taken on the model's device by argmax_rows:
//            a GPU reads back 4 bytes per sequence and step, not the logits. B = 1 decodes
//            as `forge generate` does, through a gpt2::GreedyDecoder (on a GPU the device
//            feeds each token to the next step; the host reads it one step behind).
// Reported: tokens/s of both (B x tokens / seconds), the per-step decode latency, the
// weights' and KV cache's sizes and the process's peak RSS (getrusage), all in MiB, so that
// the "peak memory <= 1.2 x (weights + KV cache)" target can be read off directly.
//   train:   optimizer steps (forward + backward + AdamW) of a second random-init model on
//            B x T random tokens (default 4 x 64, llm.c's CPU setting): one warm-up step,
//            then the median of the timed ones; train_tok_s = B T / step time; on a
//            device that tracks it (CUDA), the peak of live tensor bytes over the process
//            (train_peak_device_mb: PyTorch's max_memory_allocated).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "forge/quantize.h"
#include "forge/sampling.h"
#include "forge/threads.h"
#include "forge/train.h"

namespace forge::cli {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "bench --preset: " + what);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/// Peak resident set size of this process so far, bytes (Linux reports ru_maxrss in KiB).
double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// The next ids of a greedy decode step: argmax_rows of logits [B, V] on their device, read
/// back as ids [B, 1] (4 bytes per row; a GPU's logits stay where they are).
Tensor next_ids(const Tensor& logits) {
  const int64_t B = logits.dim(0);
  return Tensor::from_vector(argmax_rows(logits).to_vector<uint32_t>(), {B, 1});
}

/// Profile of the model's own forward (forge/device_queue.h: GPU timestamps around every
/// dispatch; on the CPU, host clocks around every kernel call): one prefill of `ids` and
/// `steps` decode steps after it, each as (kernel xD, ms) with D its dispatches per pass
/// and ms its time per pass. Kernels sum to less than the measured time by the gaps
/// between them (barriers, the host recording and waiting, the ops' own checks).
using Profile = std::vector<std::pair<std::string, double>>;

Profile per_pass(const std::vector<KernelTime>& times, int64_t passes) {
  Profile out;
  for (const KernelTime& t : times) {
    const double d = static_cast<double>(t.dispatches) / static_cast<double>(passes);
    char label[96];
    std::snprintf(label, sizeof label, "%s x%.4g", t.kernel.c_str(), d);
    out.push_back({label, t.ms / static_cast<double>(passes)});
  }
  return out;
}

std::pair<Profile, Profile> profile_device(const gpt2::Model& model, gpt2::KVCache& cache,
                                           const Tensor& ids, int64_t steps) {
  const Device d = model.device();
  cache.reset();
  set_profiling(d, true);
  Tensor next = next_ids(model.forward_cached(ids, cache));
  const Profile prefill = per_pass(kernel_times(d), 1);
  set_profiling(d, true);  // a fresh span
  for (int64_t i = 0; i < steps; ++i) next = next_ids(model.forward_cached(next, cache));
  const Profile decode = steps > 0 ? per_pass(kernel_times(d), steps) : Profile{};
  set_profiling(d, false);
  return {prefill, decode};
}

/// Training-step timing: a fresh model of `config` (training changes its weights), B x T
/// random tokens per step.
struct TrainBench {
  int64_t batch = 0, seq = 0;
  double step_ms = 0, tok_s = 0, peak_rss = 0;
  double peak_device = 0;  // the device's peak of live tensor bytes (0: not tracked)
  Profile profile;         // time per kernel of one more step (--profile)
};

TrainBench bench_train(const gpt2::Config& config, const ModelBenchOptions& o, Device device) {
  TrainBench r;
  r.batch = o.train_batch;
  r.seq = std::min<int64_t>(o.train_seq, config.n_ctx);
  if (r.batch < 1 || r.seq < 1) fail(ErrorKind::Range, "the training batch and seq must be >= 1");
  gpt2::Model model = gpt2::Model::random(config, 2, device);
  train::Hyper h;
  h.batch = r.batch;
  h.seq = r.seq;
  h.steps = 1000;  // the schedule's length does not change a step's cost
  train::Trainer trainer(model, h);
  const int64_t n = r.batch * (r.seq + 1);
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = dropout_hash(11, i) % static_cast<uint32_t>(config.vocab_size);
  // Rows of T + 1 tokens: inputs are the first T, targets the last T.
  std::vector<uint32_t> in, tg;
  for (int64_t b = 0; b < r.batch; ++b)
    for (int64_t t = 0; t < r.seq; ++t) {
      in.push_back(tokens[static_cast<size_t>(b * (r.seq + 1) + t)]);
      tg.push_back(tokens[static_cast<size_t>(b * (r.seq + 1) + t + 1)]);
    }
  const std::vector<data::Batch> batch = {
      {Tensor::from_vector(in, {r.batch, r.seq}), Tensor::from_vector(tg, {r.batch, r.seq})}};
  std::vector<double> t;
  for (int i = 0; i <= o.train_steps; ++i) {
    const auto t0 = Clock::now();
    trainer.step(batch);
    if (i > 0) t.push_back(seconds_since(t0));  // step 0 is the warm-up
  }
  r.step_ms = median(t) * 1e3;
  r.tok_s = static_cast<double>(r.batch * r.seq) / median(t);
  if (o.profile) {
    set_profiling(device, true);
    trainer.step(batch);
    r.profile = per_pass(kernel_times(device), 1);
    set_profiling(device, false);
  }
  r.peak_rss = peak_rss_bytes();
  r.peak_device = static_cast<double>(device_stats(device).peak_bytes);
  return r;
}

// Decode steps from `next` (one id per row) on a throwaway cache: one step (a GPU creates
// its pipelines there), then steps until kDecodeWarmSeconds have passed after it, starting
// over whenever the cache is full.
/// The device's queue per decode step over the timed steps: submits, dispatches, host reads
/// (a greedy GPU step reads its 4-byte token, one step behind) and buffer allocations; null
/// where the device keeps no count (the CPU) or no step ran.
nlohmann::ordered_json step_counts(const DeviceStats& a, const DeviceStats& b, int64_t steps) {
  if (!a.counted || steps <= 0) return nullptr;
  const auto per = [&](uint64_t x, uint64_t y) {
    return static_cast<double>(y - x) / static_cast<double>(steps);
  };
  return {{"submits", per(a.submits, b.submits)},
          {"dispatches", per(a.dispatches, b.dispatches)},
          {"reads", per(a.reads, b.reads)},
          {"allocations", per(a.allocations, b.allocations)}};
}

void warm_up_decode(const gpt2::Model& model, const Tensor& next) {
  constexpr double kDecodeWarmSeconds = 0.5;
  const int64_t B = next.dim(0);
  const int64_t capacity = std::min<int64_t>(64, model.config().n_ctx);
  gpt2::KVCache warm(model, B, capacity);
  std::optional<Clock::time_point> t0;  // the end of the first step
  auto more = [&] {
    if (!t0) t0 = Clock::now();
    return seconds_since(*t0) < kDecodeWarmSeconds;
  };
  bool going = true;
  while (going) {
    warm.reset();
    if (B == 1) {
      gpt2::GreedyDecoder decoder(model, warm, next.to_vector<uint32_t>()[0], capacity);
      for (int64_t i = 0; i < capacity && going; ++i) {
        (void)decoder.next();
        going = more();
      }
    } else {
      Tensor ids = next;
      for (int64_t i = 0; i < capacity && going; ++i) {
        ids = next_ids(model.forward_cached(ids, warm));
        going = more();
      }
    }
  }
}

}  // namespace

int bench_model(const ModelBenchOptions& o) {
  const Device device = parse_device(o.device);
  const DType dtype = weight_dtype_named(o.dtype);
  // A model file (its own config and dtypes), or the preset's shapes with random weights.
  std::optional<gpt2::Model> loaded;
  const auto t_load = Clock::now();
  if (!o.model.empty()) loaded = gpt2::Model::load(o.model, device);
  const gpt2::Config config = loaded ? loaded->config() : gpt2::Config::preset(o.preset);
  const int64_t B = o.batch, P = o.prompt_tokens, N = o.decode_tokens;
  if (B < 1 || P < 1 || N < 0) fail(ErrorKind::Range, "batch and prompt tokens must be >= 1");
  if (P + N > config.n_ctx)
    fail(ErrorKind::Range, "--prompt-tokens " + std::to_string(P) + " + --decode-tokens " +
                               std::to_string(N) + " exceed the context of preset " + o.preset +
                               " (n_ctx = " + std::to_string(config.n_ctx) + ")");
  double weight_bytes = loaded ? static_cast<double>(loaded->weight_bytes())
                               : 4.0 * static_cast<double>(config.num_params());
  const double kv_bytes = 2.0 * static_cast<double>(config.n_layer) * static_cast<double>(B) *
                          static_cast<double>(P + N) * static_cast<double>(config.n_embd) * 4.0;
  // Logits [B, P, V] are never materialized (only the last position's), but attention
  // scores [B H, P, P] and the MLP's [B P, 4C] are: a rough bound on the activations.
  const double act_bytes =
      4.0 * static_cast<double>(B) * static_cast<double>(P) *
      (static_cast<double>(config.n_head) * static_cast<double>(P + N) +
       8.0 * static_cast<double>(config.n_embd) + static_cast<double>(config.vocab_size) / P);
  const uint64_t memory = device_info(device).memory_bytes;
  if (memory > 0 && weight_bytes + kv_bytes + act_bytes > 0.8 * static_cast<double>(memory))
    fail(ErrorKind::Range, "preset " + o.preset + " with batch " + std::to_string(B) + " needs " +
                               std::to_string(mib(weight_bytes + kv_bytes + act_bytes)) +
                               " MiB, more than 80% of the device's memory");

  const auto t_init = loaded ? t_load : Clock::now();
  const gpt2::Model model =
      loaded ? *loaded : gpt2::Model::random(config, 1, device).converted(dtype);
  const double init_seconds = seconds_since(t_init);
  weight_bytes = static_cast<double>(model.weight_bytes());
  gpt2::KVCache cache(model, B, P + N);

  std::vector<uint32_t> prompt(static_cast<size_t>(B * P));
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = dropout_hash(7, i) % static_cast<uint32_t>(config.vocab_size);
  const Tensor ids = Tensor::from_vector(prompt, {B, P});

  // Prefill: a warm-up (page faults, pool start, packed-weight caches), then 3 timed runs.
  Tensor logits;
  std::vector<double> prefill;
  for (int r = 0; r < 4; ++r) {
    cache.reset();
    const auto t0 = Clock::now();
    logits = model.forward_cached(ids, cache);
    (void)logits.to_vector<float>();  // a GPU backend finishes its work here
    if (r > 0) prefill.push_back(seconds_since(t0));
  }
  const double prefill_s = median(prefill);

  // Decode N steps after the last prefill. The warm-up is the prefill above (it touched
  // every weight) and kDecodeWarmSeconds of decode steps on a throwaway cache: a GPU
  // creates the decode kernels' pipelines there (~1 s on a fresh driver cache), and a GPU
  // that idled through the host's seconds of building the model lowers its clocks, which
  // take ~0.2 s of work to come back (docs/PERFORMANCE.md); neither is in the timed steps.
  // A step's host part (recording the work and the argmax: on a GPU nothing waits before
  // the ids are read) is timed too: it says how much of a step the host costs.
  std::vector<double> steps, host_parts;
  steps.reserve(static_cast<size_t>(N));
  host_parts.reserve(static_cast<size_t>(N));
  Tensor next = N > 0 ? next_ids(logits) : Tensor();
  if (N > 0) warm_up_decode(model, next);
  const DeviceStats stats_before = device_stats(device);
  const auto t_dec = Clock::now();
  if (B == 1 && N > 0) {
    gpt2::GreedyDecoder decoder(model, cache, next.to_vector<uint32_t>()[0], N);
    for (int64_t i = 0; i < N; ++i) {
      const auto t0 = Clock::now();
      (void)decoder.next();
      host_parts.push_back(decoder.host_seconds());
      steps.push_back(seconds_since(t0));
    }
  }
  for (int64_t i = 0; i < N && B > 1; ++i) {
    const auto t0 = Clock::now();
    const Tensor picked = argmax_rows(model.forward_cached(next, cache));
    host_parts.push_back(seconds_since(t0));
    next = Tensor::from_vector(picked.to_vector<uint32_t>(), {B, 1});
    steps.push_back(seconds_since(t0));
  }
  const double decode_s = seconds_since(t_dec);
  const DeviceStats stats_after = device_stats(device);
  const double peak = peak_rss_bytes();

  const double prefill_tok_s = static_cast<double>(B * P) / prefill_s;
  const bool decoded = N > 0 && decode_s > 0;
  const double decode_tok_s = decoded ? static_cast<double>(B * N) / decode_s : 0.0;
  const double step_ms = decoded ? median(steps) * 1e3 : 0.0;
  const double host_ms = decoded ? median(host_parts) * 1e3 : 0.0;
  // The slowest step: a rate below the median step's shows where the time went.
  const double step_max_ms = decoded ? *std::max_element(steps.begin(), steps.end()) * 1e3 : 0.0;
  const double ratio = peak / (weight_bytes + kv_bytes);
  const int threads = num_threads();
  Profile prof_prefill, prof_decode;
  if (o.profile) std::tie(prof_prefill, prof_decode) = profile_device(model, cache, ids, N);
  const bool trained = o.train_steps > 0;
  const TrainBench tb = trained ? bench_train(config, o, device) : TrainBench{};
  auto prof_json = [](const Profile& p) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    double sum = 0;
    for (const auto& [name, ms] : p) {
      j[name] = ms;
      sum += ms;
    }
    j["sum of ops"] = sum;
    return j;
  };

  if (o.json) {
    nlohmann::ordered_json j = {
        {"preset", loaded ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.preset)},
        {"model", loaded ? nlohmann::ordered_json(o.model) : nlohmann::ordered_json(nullptr)},
        {"weights_dtype", dtype_name(model.weight_dtype())},
        {"params", config.num_params()},
        {"device", device.str()},
        {"precision", device_precision(device)},
        {"threads", threads},
        {"batch", B},
        {"prompt_tokens", P},
        {"decode_tokens", N},
        {"prefill_tok_s", prefill_tok_s},
        {"prefill_ms", prefill_s * 1e3},
        {"decode_tok_s", decoded ? nlohmann::ordered_json(decode_tok_s) : nullptr},
        {"decode_step_ms_median", decoded ? nlohmann::ordered_json(step_ms) : nullptr},
        {"decode_step_host_ms_median", decoded ? nlohmann::ordered_json(host_ms) : nullptr},
        {"decode_step_ms_max", decoded ? nlohmann::ordered_json(step_max_ms) : nullptr},
        {"decode_step_device", step_counts(stats_before, stats_after, decoded ? N : 0)},
        {"weights_mb", mib(weight_bytes)},
        {"kv_cache_mb", mib(kv_bytes)},
        {"peak_rss_mb", mib(peak)},
        {"peak_over_weights_plus_kv", ratio},
        {"init_s", init_seconds},
        {"train_batch", trained ? nlohmann::ordered_json(tb.batch) : nullptr},
        {"train_seq", trained ? nlohmann::ordered_json(tb.seq) : nullptr},
        {"train_tok_s", trained ? nlohmann::ordered_json(tb.tok_s) : nullptr},
        {"train_step_ms", trained ? nlohmann::ordered_json(tb.step_ms) : nullptr},
        {"train_peak_rss_mb", trained ? nlohmann::ordered_json(mib(tb.peak_rss)) : nullptr},
        {"train_peak_device_mb",
         trained && tb.peak_device > 0 ? nlohmann::ordered_json(mib(tb.peak_device)) : nullptr}};
    if (o.profile) {
      j["prefill_profile_ms"] = prof_json(prof_prefill);
      if (N > 0) j["decode_step_profile_ms"] = prof_json(prof_decode);
      if (!tb.profile.empty()) j["train_step_profile_ms"] = prof_json(tb.profile);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s (%.1fM params, %s weights, %s in %.2f s) on %s, %d thread%s, batch %lld\n",
              loaded ? o.model.c_str() : o.preset.c_str(),
              static_cast<double>(config.num_params()) / 1e6, dtype_name(model.weight_dtype()),
              loaded ? "loaded" : "random init", init_seconds, device.str().c_str(), threads,
              threads == 1 ? "" : "s", static_cast<long long>(B));
  std::printf("  prefill %5lld tokens  %10.1f tok/s  (%.1f ms, median of 3)\n",
              static_cast<long long>(P), prefill_tok_s, prefill_s * 1e3);
  if (decoded)
    std::printf(
        "  decode  %5lld tokens  %10.1f tok/s  (%.2f ms per step, median; %.2f ms of it until "
        "the step is recorded)\n",
        static_cast<long long>(N), decode_tok_s, step_ms, host_ms);
  std::printf("  memory: weights %.1f MiB + KV cache %.1f MiB; peak RSS %.1f MiB (%.2fx)\n",
              mib(weight_bytes), mib(kv_bytes), mib(peak), ratio);
  if (trained)
    std::printf(
        "  train   %lld x %lld tokens %8.1f tok/s  (%.1f ms per optimizer step, median of "
        "%d; peak RSS %.1f MiB%s)\n",
        static_cast<long long>(tb.batch), static_cast<long long>(tb.seq), tb.tok_s, tb.step_ms,
        o.train_steps, mib(tb.peak_rss),
        tb.peak_device > 0
            ? ("; peak device memory " + std::to_string(std::lround(mib(tb.peak_device))) + " MiB")
                  .c_str()
            : "");
  const char* by = device.is_cpu() ? "host time per kernel" : "GPU time per kernel";
  auto print_profile = [by](const char* what, double measured_ms, const Profile& p) {
    std::printf("  %s, %s (ms; measured step: %.2f ms):\n", what, by, measured_ms);
    double sum = 0;
    for (const auto& [name, ms] : p) {
      std::printf("    %-30s %9.3f  %5.1f%%\n", name.c_str(), ms, 100.0 * ms / measured_ms);
      sum += ms;
    }
    std::printf("    %-30s %9.3f  %5.1f%%\n", "sum", sum, 100.0 * sum / measured_ms);
  };
  if (o.profile) {
    print_profile("prefill", prefill_s * 1e3, prof_prefill);
    if (N > 0) print_profile("decode step", step_ms, prof_decode);
    if (!tb.profile.empty()) print_profile("training step", tb.step_ms, tb.profile);
  }
  return 0;
}

}  // namespace forge::cli
