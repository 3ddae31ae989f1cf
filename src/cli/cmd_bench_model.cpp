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
//            then the median of the timed ones; train_tok_s = B T / step time.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "forge/backend.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
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

/// Per-op time of one forward step of B x T tokens at position `pos` (a prefill: pos 0,
/// T = P; a decode step: T = 1, pos = P), measured op by op the way forward.cpp calls
/// them. Each op kind runs over all L layers' own weights (so that caches see the real
/// traffic, not one layer's weights kept hot), 3 times; the median is reported, in ms per
/// step. The ops' sum against the measured step time shows the overhead between ops.
std::vector<std::pair<std::string, double>> profile_step(const gpt2::Model& model, int64_t B,
                                                         int64_t T, int64_t pos) {
  const gpt2::Config& c = model.config();
  const gpt2::Weights& w = model.weights();
  const int64_t C = c.n_embd, H = c.n_head, hd = c.head_dim(), S = pos + T, L = c.n_layer;
  const Device dev = model.device();
  auto rand = [&](const Shape& shape, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(dropout_hash(seed, i) >> 8) * (2.0f / 16777216.0f) - 1.0f;
    return Tensor::from_vector(v, shape, dev);
  };
  Tensor x2 = rand({B * T, C}, 1);
  const Tensor qkv = rand({B, T, 3 * C}, 2);
  const Tensor q = split_heads(qkv, H, 0), k = split_heads(qkv, H, 1);
  std::vector<Tensor> kc, vc;  // per-layer caches [B H, S, hd], as KVCache holds them
  for (int64_t l = 0; l < L; ++l) {
    kc.push_back(rand({B * H, S, hd}, 10 + static_cast<uint64_t>(l)));
    vc.push_back(rand({B * H, S, hd}, 100 + static_cast<uint64_t>(l)));
  }
  const MatmulSpec qk{.trans_a = false,
                      .trans_b = true,
                      .alpha = 1.0f / std::sqrt(static_cast<float>(hd)),
                      .b_rows = S};
  const MatmulSpec pv{.trans_a = false, .trans_b = false, .alpha = 1.0f, .b_rows = S};
  const Tensor att = softmax(matmul(q, kc[0], qk), true, pos);
  const Tensor y = rand({B * T, C}, 3), f = rand({B * T, 4 * C}, 4);
  const Tensor ids =
      Tensor::from_vector(std::vector<uint32_t>(static_cast<size_t>(B * T), 1), {B, T}, dev);
  auto layer = [&](size_t l) -> const gpt2::LayerWeights& { return w.layers[l]; };

  std::vector<std::pair<std::string, std::function<void()>>> ops = {
      {"embedding", [&] { embedding_chunked(ids, w.wte); }},
      {"layernorm (ln_1, ln_2)",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l) {
           layernorm(x2, layer(l).ln_1_w, layer(l).ln_1_b, c.eps);
           layernorm(x2, layer(l).ln_2_w, layer(l).ln_2_b, c.eps);
         }
       }},
      {"matmul qkv [C, 3C]",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l)
           matmul(y, layer(l).attn_w, {}, layer(l).attn_b);
       }},
      {"split_heads + kv_append",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l) {
           split_heads(qkv, H, 0);
           Tensor kk = split_heads(qkv, H, 1), vv = split_heads(qkv, H, 2);
           kv_append(kc[l], kk, pos);
           kv_append(vc[l], vv, pos);
         }
       }},
      {"attention q k^T",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l) matmul(q, kc[l], qk);
       }},
      {"attention softmax",
       [&] {
         const Tensor a = matmul(q, kc[0], qk);
         for (int64_t l = 0; l < L; ++l) softmax(a, true, pos);
       }},
      {"attention p v",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l) matmul(att, vc[l], pv);
       }},
      {"merge_heads",
       [&] {
         const Tensor yh = matmul(att, vc[0], pv);
         for (int64_t l = 0; l < L; ++l) merge_heads(yh, H);
       }},
      {"matmul attn_proj [C, C]",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l)
           matmul(y, layer(l).attn_proj_w, {}, layer(l).attn_proj_b);
       }},
      {"matmul fc [C, 4C]",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l)
           matmul(y, layer(l).fc_w, {}, layer(l).fc_b);
       }},
      {"gelu",
       [&] {
         for (int64_t l = 0; l < L; ++l) gelu(f);
       }},
      {"matmul fc_proj [4C, C]",
       [&] {
         for (size_t l = 0; l < static_cast<size_t>(L); ++l)
           matmul(f, layer(l).fc_proj_w, {}, layer(l).fc_proj_b);
       }},
      {"residual add_",
       [&] {
         for (int64_t l = 0; l < 2 * L; ++l) add_(x2, y);
       }},
      {"ln_f + lm_head [C, V]",
       [&] {
         model.lm_head(layernorm(x2.narrow_rows(0, B), w.ln_f_w, w.ln_f_b, c.eps))
             .to_vector<float>();
       }},
  };
  std::vector<std::pair<std::string, double>> out;
  for (auto& [name, fn] : ops) {
    fn();  // warm-up
    std::vector<double> t;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = Clock::now();
      fn();
      t.push_back(seconds_since(t0));
    }
    out.push_back({name, median(t) * 1e3});
  }
  return out;
}

/// Device-side profile of a GPU model (timestamp queries around every dispatch): one
/// prefill of `ids` and `steps` decode steps after it, each as (kernel xD, ms) with D its
/// dispatches per pass and ms its GPU time per pass. Kernels sum to less than the measured
/// time by the gaps between dispatches (barriers, the host recording and waiting).
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
  Backend& be = backend_for(model.device());
  cache.reset();
  be.set_profiling(true);
  Tensor next = next_ids(model.forward_cached(ids, cache));
  const Profile prefill = per_pass(be.kernel_times(), 1);
  be.set_profiling(true);  // a fresh span
  for (int64_t i = 0; i < steps; ++i) next = next_ids(model.forward_cached(next, cache));
  const Profile decode = steps > 0 ? per_pass(be.kernel_times(), steps) : Profile{};
  be.set_profiling(false);
  return {prefill, decode};
}

/// Training-step timing: a fresh model of `config` (training changes its weights), B x T
/// random tokens per step.
struct TrainBench {
  int64_t batch = 0, seq = 0;
  double step_ms = 0, tok_s = 0, peak_rss = 0;
  Profile profile;  // GPU time per kernel of one more step (--profile on a GPU)
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
  if (o.profile && !device.is_cpu()) {
    Backend& be = backend_for(device);
    be.set_profiling(true);
    trainer.step(batch);
    r.profile = per_pass(be.kernel_times(), 1);
    be.set_profiling(false);
  }
  r.peak_rss = peak_rss_bytes();
  return r;
}

}  // namespace

int bench_model(const ModelBenchOptions& o) {
  const gpt2::Config config = gpt2::Config::preset(o.preset);
  const Device device = parse_device(o.device);
  const int64_t B = o.batch, P = o.prompt_tokens, N = o.decode_tokens;
  if (B < 1 || P < 1 || N < 0) fail(ErrorKind::Range, "batch and prompt tokens must be >= 1");
  if (P + N > config.n_ctx)
    fail(ErrorKind::Range, "--prompt-tokens " + std::to_string(P) + " + --decode-tokens " +
                               std::to_string(N) + " exceed the context of preset " + o.preset +
                               " (n_ctx = " + std::to_string(config.n_ctx) + ")");
  const double weight_bytes = 4.0 * static_cast<double>(config.num_params());
  const double kv_bytes = 2.0 * static_cast<double>(config.n_layer) * static_cast<double>(B) *
                          static_cast<double>(P + N) * static_cast<double>(config.n_embd) * 4.0;
  // Logits [B, P, V] are never materialized (only the last position's), but attention
  // scores [B H, P, P] and the MLP's [B P, 4C] are: a rough bound on the activations.
  const double act_bytes =
      4.0 * static_cast<double>(B) * static_cast<double>(P) *
      (static_cast<double>(config.n_head) * static_cast<double>(P + N) +
       8.0 * static_cast<double>(config.n_embd) + static_cast<double>(config.vocab_size) / P);
  const uint64_t memory = backend_for(device).info().memory_bytes;
  if (memory > 0 && weight_bytes + kv_bytes + act_bytes > 0.8 * static_cast<double>(memory))
    fail(ErrorKind::Range, "preset " + o.preset + " with batch " + std::to_string(B) + " needs " +
                               std::to_string(mib(weight_bytes + kv_bytes + act_bytes)) +
                               " MiB, more than 80% of the device's memory");

  const auto t_init = Clock::now();
  const gpt2::Model model = gpt2::Model::random(config, 1, device);
  const double init_seconds = seconds_since(t_init);
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
  // every weight) and one step on a throwaway cache of one position: a GPU creates the
  // decode kernels' pipelines there (~1 s on a fresh driver cache), not in the timed steps.
  // A step's host part (recording the work and the argmax: on a GPU nothing waits before
  // the ids are read) is timed too: it says how much of a step the host costs.
  std::vector<double> steps, host_parts;
  steps.reserve(static_cast<size_t>(N));
  host_parts.reserve(static_cast<size_t>(N));
  Tensor next = N > 0 ? next_ids(logits) : Tensor();
  if (N > 0) {
    gpt2::KVCache warm(model, B, 1);
    if (B == 1)
      (void)gpt2::GreedyDecoder(model, warm, next.to_vector<uint32_t>()[0], 1).next();
    else
      (void)argmax_rows(model.forward_cached(next, warm)).to_vector<uint32_t>();
  }
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
  const double peak = peak_rss_bytes();

  const double prefill_tok_s = static_cast<double>(B * P) / prefill_s;
  const bool decoded = N > 0 && decode_s > 0;
  const double decode_tok_s = decoded ? static_cast<double>(B * N) / decode_s : 0.0;
  const double step_ms = decoded ? median(steps) * 1e3 : 0.0;
  const double host_ms = decoded ? median(host_parts) * 1e3 : 0.0;
  const double ratio = peak / (weight_bytes + kv_bytes);
  const int threads = num_threads();
  Profile prof_prefill, prof_decode;
  if (o.profile && device.is_cpu()) {
    prof_prefill = profile_step(model, B, P, 0);
    if (N > 0) prof_decode = profile_step(model, B, 1, P);
  } else if (o.profile) {
    std::tie(prof_prefill, prof_decode) = profile_device(model, cache, ids, N);
  }
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
        {"preset", o.preset},
        {"params", config.num_params()},
        {"device", device.str()},
        {"threads", threads},
        {"batch", B},
        {"prompt_tokens", P},
        {"decode_tokens", N},
        {"prefill_tok_s", prefill_tok_s},
        {"prefill_ms", prefill_s * 1e3},
        {"decode_tok_s", decoded ? nlohmann::ordered_json(decode_tok_s) : nullptr},
        {"decode_step_ms_median", decoded ? nlohmann::ordered_json(step_ms) : nullptr},
        {"decode_step_host_ms_median", decoded ? nlohmann::ordered_json(host_ms) : nullptr},
        {"weights_mb", mib(weight_bytes)},
        {"kv_cache_mb", mib(kv_bytes)},
        {"peak_rss_mb", mib(peak)},
        {"peak_over_weights_plus_kv", ratio},
        {"init_s", init_seconds},
        {"train_batch", trained ? nlohmann::ordered_json(tb.batch) : nullptr},
        {"train_seq", trained ? nlohmann::ordered_json(tb.seq) : nullptr},
        {"train_tok_s", trained ? nlohmann::ordered_json(tb.tok_s) : nullptr},
        {"train_step_ms", trained ? nlohmann::ordered_json(tb.step_ms) : nullptr},
        {"train_peak_rss_mb", trained ? nlohmann::ordered_json(mib(tb.peak_rss)) : nullptr}};
    if (o.profile) {
      j["prefill_profile_ms"] = prof_json(prof_prefill);
      if (N > 0) j["decode_step_profile_ms"] = prof_json(prof_decode);
      if (!tb.profile.empty()) j["train_step_profile_ms"] = prof_json(tb.profile);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s (%.1fM params, random init in %.2f s) on %s, %d thread%s, batch %lld\n",
              o.preset.c_str(), static_cast<double>(config.num_params()) / 1e6, init_seconds,
              device.str().c_str(), threads, threads == 1 ? "" : "s", static_cast<long long>(B));
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
        "%d; peak RSS %.1f MiB)\n",
        static_cast<long long>(tb.batch), static_cast<long long>(tb.seq), tb.tok_s, tb.step_ms,
        o.train_steps, mib(tb.peak_rss));
  const char* by = device.is_cpu() ? "op by op" : "GPU time per kernel";
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
