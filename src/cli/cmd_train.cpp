// forge train: trains a GPT-2 from scratch (--preset or explicit sizes) or fine-tunes one
// (--init-from MODEL_DIR) on a text file, a folder of .txt files or a token file.
//
// OUT/ after a run (and after every checkpoint):
//   train_state.safetensors  weights + AdamW moments + step + sampler position + the run's
//                            settings (everything --resume needs; written first)
//   config.json, model.safetensors, tokenizer files   an HF GPT-2 folder (forge generate -m
//                            OUT, GPT2LMHeadModel.from_pretrained(OUT))
//   metrics.jsonl            one JSON object per step: step, loss, lr, grad_norm, tok_s,
//                            time [, val_loss] [, skipped]
//   loss.svg                 train and validation loss against the step
//   tokens.bin, tokens.json  the tokenized text (a cache; re-made when the text changes)
//
// Every file is replaced atomically (temp file + rename), and the training state is written
// before the model files, so a kill at any instant leaves OUT resumable: train_state holds
// everything a resume needs, and each model file is either the previous or the new version.
//
// Resume: --resume takes every setting from the state file; options given again must agree
// with it, except those that do not change the trajectory (eval, sample, save, stop and
// output options). The data must tokenize to the same ids (checked by a fingerprint), so a
// resumed run draws exactly the batches the uninterrupted one would have: its losses and
// weights are bit-identical (same thread count).
//
// Signals: the first SIGINT/SIGTERM lets the current step finish, saves a checkpoint and
// exits with 128 + signal; a second one exits at once (the last checkpoint is intact).
//
// The folder's mechanics (lock, atomic files, staged model saves, the metrics log, the
// signals) are src/train/ (forge/run_dir.h); this file parses, runs the loop and prints.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/id_list.h"
#include "cli/loss_plot.h"
#include "cli/progress.h"
#include "cli/train_args.h"
#include "cli/train_ranks.h"
#include "forge/data.h"
#include "forge/devices.h"
#include "forge/dist.h"
#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/run_dir.h"
#include "forge/safetensors.h"
#include "forge/threads.h"
#include "forge/tokenizer.h"
#include "forge/train.h"
#include "forge/version.h"

namespace forge::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr const char* kStateFile = "train_state.safetensors";
constexpr const char* kMetricsFile = "metrics.jsonl";
constexpr const char* kPlotFile = "loss.svg";
constexpr const char* kDefaultPreset = "mini";
// Metadata keys of the state file (besides what Trainer::save_state stores itself).
constexpr const char* kMetaSettings = "forge_train_settings";
constexpr const char* kMetaModel = "forge_model_config";
constexpr const char* kMetaSampler = "forge_sampler_position";
constexpr const char* kMetaData = "forge_data_fingerprint";
constexpr const char* kMetaCache = "forge_data_cache";
constexpr const char* kMetaElapsed = "forge_elapsed_seconds";

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "train: " + what);
}

// ---- small helpers ----------------------------------------------------------------------

/// FNV-1a over the bytes of `v`, continuing from `h`.
uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

/// What decides the batches: the split's token ids (and the tokenizer that made them).
std::string data_fingerprint(const data::Dataset& d) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const std::vector<uint32_t>* part : {&d.train, &d.val}) {
    const uint64_t n = part->size();
    h = fnv1a(h, &n, sizeof n);
    h = fnv1a(h, part->data(), part->size() * sizeof(uint32_t));
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "train %zu val %zu fnv1a %016llx", d.train.size(), d.val.size(),
                static_cast<unsigned long long>(h));
  return buf;
}

/// GPT-2's tokenizer files as scripts/fetch_tokenizer.sh puts them: FORGE_TOKENIZER_DIR, else
/// data/gpt2-tokenizer beside or above the executable's folder. "" when none is found.
std::string default_tokenizer_dir() {
  if (const char* env = std::getenv("FORGE_TOKENIZER_DIR"); env != nullptr && *env != '\0') {
    if (!Tokenizer::available(env))
      fail(ErrorKind::Tokenizer, std::string("FORGE_TOKENIZER_DIR='") + env +
                                     "' holds no tokenizer files (encoder.json + vocab.bpe, "
                                     "vocab.json + merges.txt, or tokenizer.json)");
    return env;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const fs::path& dir : {exe.parent_path() / ".." / "data" / "gpt2-tokenizer",
                              exe.parent_path() / "data" / "gpt2-tokenizer"})
    if (Tokenizer::available(dir.string())) return fs::weakly_canonical(dir, ec).string();
  return "";
}

// ---- the run ----------------------------------------------------------------------------

struct Prepared {
  gpt2::Config config;
  std::optional<gpt2::Model> init;  // --init-from's model (not on resume)
};

std::string fmt_loss(double v) {
  if (std::isnan(v)) return "nan";  // glibc may print "-nan"
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

/// Applies the state file's settings to `a` (options given again must agree) and returns
/// its metadata. Error for a missing or unreadable state and for disagreeing options.
std::map<std::string, std::string> apply_resume(TrainArgs& a, const std::vector<Setting>& settings,
                                                const fs::path& state) {
  std::error_code ec;
  if (!fs::exists(state, ec))
    fail(ErrorKind::Io, "--resume: no training state to resume: " + state.string() +
                            " does not exist (start without --resume)");
  std::map<std::string, std::string> meta;
  try {
    meta = SafeTensorsFile::open(state.string()).metadata();
  } catch (const Error& e) {
    fail(e.kind(), "--resume: " + state.string() + " is not a usable training state: " + e.what());
  }
  ordered_json saved;
  try {
    saved = ordered_json::parse(meta.at(kMetaSettings));
  } catch (const std::exception&) {
    fail(ErrorKind::Format, "--resume: " + state.string() +
                                " holds no forge train settings (not written by forge train?)");
  }
  for (const Setting& s : settings) {
    if (!saved.contains(s.key) && !s.absent.is_null()) saved[s.key] = s.absent;
    if (!saved.contains(s.key)) {
      if (s.on_resume == OnResume::Free) continue;
      fail(ErrorKind::Format, "--resume: " + state.string() + " lacks the setting '" + s.key + "'");
    }
    const bool given = s.option->count() > 0;
    if (s.on_resume == OnResume::Free && given) continue;
    if (s.on_resume == OnResume::Fixed && given && s.get(a) != saved[s.key])
      fail(ErrorKind::Format, "--resume: " + s.option->get_name() + " " + s.get(a).dump() +
                                  " does not match the checkpoint's " + saved[s.key].dump() +
                                  " (leave it out to keep the checkpoint's, or train into "
                                  "another --out)");
    if (s.on_resume == OnResume::Input && given) continue;  // checked by the fingerprint
    try {
      s.set(a, saved[s.key]);
    } catch (const std::exception&) {
      fail(ErrorKind::Format, "--resume: " + state.string() + ": bad setting '" + s.key + "'");
    }
  }
  return meta;
}

/// The model's config: the checkpoint's (resume), the --init-from model's, or the preset's
/// with explicit sizes applied and the vocabulary fitted to the data.
Prepared prepare_model(const TrainArgs& a, const std::vector<Setting>& settings,
                       const data::Dataset& d, const std::map<std::string, std::string>* meta) {
  Prepared p;
  auto given = [&](const char* key) {
    for (const Setting& s : settings)
      if (s.key == key) return s.option->count() > 0;
    return false;
  };
  if (meta != nullptr) {
    const auto it = meta->find(kMetaModel);
    if (it == meta->end()) fail(ErrorKind::Format, "--resume: the state holds no model config");
    p.config = gpt2::Config::from_json(it->second, "the training state's model config");
  } else if (!a.init_from.empty()) {
    for (const char* k : {"preset", "layers", "heads", "embd", "ctx"})
      if (given(k))
        fail(ErrorKind::Format, std::string("--") + k +
                                    " cannot be combined with --init-from (the model folder "
                                    "fixes the architecture)");
    // Training updates f32 weights: a model of 16-bit (or GGUF) weights is widened exactly.
    p.init = gpt2::Model::load(a.init_from, parse_device(a.device)).widened();
    p.config = p.init->config();
  } else {
    p.config = gpt2::Config::preset(a.preset);
    if (a.layers > 0) p.config.n_layer = a.layers;
    if (a.heads > 0) p.config.n_head = a.heads;
    if (a.embd > 0) p.config.n_embd = a.embd;
    if (a.ctx > 0) p.config.n_ctx = a.ctx;
    if (d.has_tokenizer && d.tokenizer.is_char_level()) {
      // A character vocabulary is the data's own: the preset's size means nothing for it.
      p.config.vocab_size = d.vocab_size;
      const int64_t eot = d.tokenizer.eot_id();
      p.config.bos_id = p.config.eos_id = eot >= 0 && eot < d.vocab_size ? eot : -1;
    }
    if (p.config.n_embd % p.config.n_head != 0)
      fail(ErrorKind::Range, "--embd " + std::to_string(p.config.n_embd) +
                                 " must be a multiple of --heads " +
                                 std::to_string(p.config.n_head));
    p.config.validate();
  }
  if (d.vocab_size > p.config.vocab_size)
    fail(ErrorKind::Range, "the data's vocabulary (" + std::to_string(d.vocab_size) +
                               " ids) does not fit the model's (" +
                               std::to_string(p.config.vocab_size) +
                               "); use a larger vocab (--preset), or --tokenizer char");
  return p;
}

int run_train(TrainArgs a, const std::vector<Setting>& settings) {
  const auto t_start = Clock::now();
  dist::Comm& job = dist::job();
  const bool lead = job.rank() == 0;
  if (a.out.empty()) fail(ErrorKind::Format, "--out must name a folder");
  const fs::path out = a.out;
  std::error_code ec;
  if (lead) fs::create_directories(out, ec);
  job.barrier();  // the folder exists for every rank
  if (!fs::is_directory(out, ec))
    fail(ErrorKind::Io, "cannot create the output folder " + out.string());
  // Rank 0 owns the folder: it alone writes checkpoints and metrics.
  if (lead) train::claim_run_dir(out.string());
  const fs::path state_path = out / kStateFile;

  std::map<std::string, std::string> meta;
  if (a.resume) {
    meta = apply_resume(a, settings, state_path);
  } else if (fs::exists(state_path, ec)) {
    fail(ErrorKind::Io, out.string() + " already holds a training run (" + kStateFile +
                            "): continue it with --resume, or train into another --out");
  }
  if (a.data.empty())
    fail(ErrorKind::Format,
         "--data is required (a text file, a folder of .txt "
         "files, or a token file)");

  Ranks ranks = plan_ranks(a, job);
  if (!a.sum_timeline.empty() && (ranks.job == nullptr || parse_device(a.device).is_cpu()))
    fail(ErrorKind::Unsupported,
         "--sum-timeline times the NCCL sums of a data-parallel run on cuda devices (mpirun -np "
         "N, or FORGE_SUM_ALONE=1 on one GPU); this run has none");
  // Settings are checked before the (slow) data and model loading.
  train::Hyper h;
  h.steps = a.steps;
  h.batch = a.batch;
  h.micro_batch = a.micro_batch;
  h.seq = a.seq;
  h.lr = a.lr;
  h.warmup = a.warmup;
  h.weight_decay = static_cast<float>(a.weight_decay);
  h.clip = a.clip;
  h.dropout = static_cast<float>(a.dropout);
  h.seed = a.seed;
  h.validate();
  set_device_precision(parse_device(a.device), a.precision);
  if (!(a.val_fraction >= 0.0 && a.val_fraction <= 0.5))
    fail(ErrorKind::Range,
         "--val-fraction must be in [0, 0.5], got " + std::to_string(a.val_fraction));

  // Tokenizer: --tokenizer, else (fine-tuning) the model's own, else GPT-2's default files.
  std::error_code dec;
  const bool token_file = data::is_token_file(a.data);
  if (a.tokenizer.empty() && !token_file) {
    if (!a.init_from.empty() && Tokenizer::available(a.init_from))
      a.tokenizer = a.init_from;
    else
      a.tokenizer = default_tokenizer_dir();
    if (a.tokenizer.empty())
      fail(ErrorKind::Tokenizer,
           "no tokenizer: GPT-2's files were not found (run scripts/fetch_tokenizer.sh, or set "
           "FORGE_TOKENIZER_DIR); or pass --tokenizer DIR, or --tokenizer char");
  }
  if (!a.data.empty()) a.data = fs::absolute(a.data, dec).lexically_normal().string();
  if (!a.tokenizer.empty() && a.tokenizer != "char")
    a.tokenizer = fs::absolute(a.tokenizer, dec).lexically_normal().string();
  if (!a.init_from.empty())
    a.init_from = fs::absolute(a.init_from, dec).lexically_normal().string();
  if (a.preset.empty()) a.preset = kDefaultPreset;

  data::DataOptions dopt;
  dopt.path = a.data;
  dopt.tokenizer = a.tokenizer;
  dopt.cache_dir = out.string();
  dopt.val_fraction = a.val_fraction;
  // Tokenizing a large text takes a while (once: the tokens are cached in OUT). Rank 0
  // tokenizes and writes the cache; the other ranks then read it.
  if (ranks.lead()) std::fprintf(stderr, "forge train: loading %s\n", a.data.c_str());
  if (ranks.job && !ranks.lead()) ranks.job->barrier();
  data::Dataset dataset = data::load(dopt);
  if (ranks.job && ranks.lead()) ranks.job->barrier();
  std::optional<Tokenizer> tok;
  if (dataset.has_tokenizer)
    tok = dataset.tokenizer;
  else if (!a.tokenizer.empty() && a.tokenizer != "char")
    tok = Tokenizer::load(a.tokenizer);  // a token file's tokenizer, for samples and OUT
  const std::string fingerprint = data_fingerprint(dataset);
  if (a.resume && meta.count(kMetaData) && meta.at(kMetaData) != fingerprint)
    fail(ErrorKind::Format, "--resume: the data does not match the checkpoint's (now: " +
                                fingerprint + "; checkpoint: " + meta.at(kMetaData) +
                                "): the text, tokenizer or --val-fraction changed");

  Prepared prep = prepare_model(a, settings, dataset, a.resume ? &meta : nullptr);
  const gpt2::Config& cfg = prep.config;
  if (a.seq == 0) a.seq = cfg.n_ctx;
  if (a.micro_batch == 0) a.micro_batch = a.batch;
  split_micro(ranks, a);
  h.seq = a.seq;
  h.micro_batch = a.micro_batch;
  if (a.seq > cfg.n_ctx)
    fail(ErrorKind::Range, "--seq " + std::to_string(a.seq) + " exceeds the model's context (" +
                               std::to_string(cfg.n_ctx) + " positions)");
  // llm.c's rule: the training split must hold at least one batch (B x T + 1 tokens).
  const int64_t need = a.batch * a.seq + 1;
  if (static_cast<int64_t>(dataset.train.size()) < need)
    fail(ErrorKind::Range, "the data is shorter than one batch: the training split holds " +
                               std::to_string(dataset.train.size()) + " tokens, --batch " +
                               std::to_string(a.batch) + " x --seq " + std::to_string(a.seq) +
                               " needs " + std::to_string(need) +
                               " (give more text, or a smaller --batch/--seq)");

  gpt2::Model model =
      prep.init ? std::move(*prep.init) : gpt2::Model::random(cfg, a.seed, parse_device(a.device));
  prep.init.reset();
  train::Trainer trainer(model, h, ranks.job);
  if (!a.sum_timeline.empty() && ranks.lead()) trainer.set_sum_timeline(a.sum_timeline);

  // The sampler shares the training tokens (moved, not copied: they may be large).
  const auto train_tokens = std::make_shared<const std::vector<uint32_t>>(std::move(dataset.train));
  data::BatchSampler sampler(train_tokens, ranks.micro, a.seq, a.seed);
  double elapsed_before = 0;
  if (a.resume) {
    try {
      trainer.load_state(state_path.string());
      sampler.seek(std::stoull(meta.at(kMetaSampler)));
      if (meta.count(kMetaElapsed)) elapsed_before = std::stod(meta.at(kMetaElapsed));
    } catch (const Error& e) {
      fail(e.kind(), "--resume: " + std::string(e.what()));
    } catch (const std::exception&) {
      fail(ErrorKind::Format, "--resume: " + state_path.string() + ": bad sampler position");
    }
  }
  const int64_t first_step = trainer.step_count();
  const std::vector<data::Batch> val_batches =
      data::sequential_batches(dataset.val, a.micro_batch, a.seq, a.eval_batches);

  train::MetricsLog metrics((out / kMetricsFile).string());
  if (lead) metrics.truncate_to(first_step);  // a fresh run: an empty file

  const ordered_json settings_now = settings_json(a, settings);
  char params_text[32];
  std::snprintf(params_text, sizeof params_text, "%.2fM",
                static_cast<double>(cfg.num_params()) / 1e6);
  const std::string plot_title = "forge train: " + fs::absolute(out, dec).filename().string() +
                                 " (" + params_text + " parameters)";
  auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(Clock::now() - t_start).count();
  };
  bool tokenizer_saved = false;
  int64_t saved_step = a.resume ? first_step : -1;
  auto save = [&](int64_t step) {
    std::map<std::string, std::string> m = {
        {kMetaSettings, settings_now.dump()},
        {kMetaModel, cfg.to_json()},
        {kMetaSampler, std::to_string(sampler.position())},
        {kMetaData, fingerprint},
        {kMetaCache, dataset.cache_path},
        {kMetaElapsed, std::to_string(elapsed())},
        {"forge_version", kVersion},
    };
    // The state first: with it alone a resume is possible, whatever happens next.
    trainer.save_state(state_path.string(), m);
    train::save_model_atomically(model, out.string());
    if (tok && !tokenizer_saved) {
      tok->save(out.string());
      tokenizer_saved = true;
    }
    train::write_file_atomic((out / kPlotFile).string(),
                             loss_plot_svg(metrics.train(), metrics.val(), plot_title));
    saved_step = step;
  };

  // Only rank 0 reports; the other ranks' progress goes nowhere.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(nullptr, std::fclose);
  if (!lead) quiet.reset(std::fopen("/dev/null", "w"));
  std::FILE* const report = lead || !quiet ? stderr : quiet.get();
  const bool tty = lead && ::isatty(STDERR_FILENO) != 0;
  Progress progress(a.steps, first_step, report, tty);
  std::fprintf(report,
               "forge train: %.2fM parameters (%lld layers, %lld heads, %lld wide, ctx %lld, "
               "vocab %lld); %zu train + %zu val tokens; batch %lld x %lld tokens%s; %s%d "
               "thread%s\n",
               static_cast<double>(cfg.num_params()) / 1e6, static_cast<long long>(cfg.n_layer),
               static_cast<long long>(cfg.n_head), static_cast<long long>(cfg.n_embd),
               static_cast<long long>(cfg.n_ctx), static_cast<long long>(cfg.vocab_size),
               train_tokens->size(), dataset.val.size(), static_cast<long long>(a.batch),
               static_cast<long long>(a.seq),
               ranks.micro < ranks.local
                   ? (" (micro-batches of " + std::to_string(ranks.micro) + ")").c_str()
                   : "",
               ranks.size > 1 ? (std::to_string(ranks.size) + " ranks x ").c_str() : "",
               num_threads(), num_threads() == 1 ? "" : "s");
  if (a.resume)
    std::fprintf(report, "forge train: resuming at step %lld of %lld%s\n",
                 static_cast<long long>(first_step), static_cast<long long>(a.steps),
                 first_step >= a.steps ? " (the run is already complete)" : "");
  if (val_batches.empty() && a.val_fraction > 0)
    std::fprintf(report,
                 "forge train: warning: the validation split (%zu tokens) is shorter than one "
                 "sequence; no validation loss\n",
                 dataset.val.size());

  auto sample = [&](int64_t step) {
    std::vector<uint32_t> prompt;
    if (tok && tok->eot_id() >= 0 && tok->eot_id() < cfg.vocab_size)
      prompt.push_back(static_cast<uint32_t>(tok->eot_id()));
    else
      prompt.push_back(train_tokens->front());
    gpt2::GenerateOptions g;
    g.max_new_tokens = std::min<int64_t>(a.sample_tokens, cfg.n_ctx - 1);
    // nanoGPT's sample.py settings.
    g.sampling.temperature = 0.8f;
    g.sampling.top_k = 200;
    g.sampling.seed = a.seed;
    const gpt2::GenerateResult r = gpt2::generate(model, prompt, g, tok ? &*tok : nullptr);
    std::string text = r.text;
    if (!tok)
      for (size_t i = 0; i < r.ids.size(); ++i) text += (i ? " " : "") + std::to_string(r.ids[i]);
    progress.note("--- sample at step " + std::to_string(step) + " ---\n" + text + "\n---");
  };

  train::install_stop_signals();
  double last_val = std::nan(""), last_loss = std::nan("");
  double step_seconds = 0;
  int64_t tokens_done = 0, steps_done = 0, eval_step = -1;
  int64_t step = first_step;
  std::string stop_reason;
  // The ranks stop together: a signal that any of them got stops all at the same step.
  auto agreed_signal = [&]() -> int {
    const int mine = train::stop_signal();
    if (!ranks.job) return mine;
    double got[2] = {mine == SIGINT ? 1.0 : 0.0, mine == SIGTERM ? 1.0 : 0.0};
    ranks.job->sum(got, 2);
    return got[0] > 0 ? SIGINT : got[1] > 0 ? SIGTERM : 0;
  };
  const int64_t micro_steps = ranks.local / ranks.micro;
  while (step < a.steps) {
    // Each global batch is the sampler's next a.batch windows; this rank takes its slice.
    std::vector<data::Batch> micro;
    micro.reserve(static_cast<size_t>(micro_steps));
    const uint64_t batch_start = sampler.position();
    sampler.seek(batch_start + static_cast<uint64_t>(ranks.rank * ranks.local));
    for (int64_t i = 0; i < micro_steps; ++i) micro.push_back(sampler.next());
    sampler.seek(batch_start + static_cast<uint64_t>(a.batch));
    const train::StepStats s = trainer.step(micro);
    step = s.step;
    ++steps_done;
    step_seconds += s.seconds;
    tokens_done += s.tokens;
    last_loss = s.loss;
    const double tok_s = s.seconds > 0 ? static_cast<double>(s.tokens) / s.seconds : 0.0;
    progress.step({s.step, s.loss, s.lr, s.grad_norm, tok_s, s.skipped});

    ordered_json rec = {{"step", s.step},           {"loss", s.loss}, {"lr", s.lr},
                        {"grad_norm", s.grad_norm}, {"tok_s", tok_s}, {"time", elapsed()}};
    if (s.skipped) rec["skipped"] = true;
    if (lead && !val_batches.empty() &&
        ((a.eval_every > 0 && step % a.eval_every == 0) || step == a.steps)) {
      last_val = trainer.evaluate(val_batches);
      eval_step = step;
      rec["val_loss"] = last_val;
      progress.note("step " + std::to_string(step) + ": val loss " + fmt_loss(last_val));
    }
    if (lead) metrics.append(rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (lead && a.sample_every > 0 && step % a.sample_every == 0) sample(step);

    if (const int sig = agreed_signal(); sig != 0) {
      stop_reason = sig == SIGINT ? "SIGINT" : "SIGTERM";
      break;
    }
    if (a.stop_after > 0 && steps_done >= a.stop_after && step < a.steps) {
      stop_reason = "--stop-after";
      break;
    }
    if (lead && a.save_every > 0 && step % a.save_every == 0 && step < a.steps) save(step);
  }
  progress.finish();
  if (lead && (saved_step != step || !fs::exists(out / "model.safetensors", ec))) save(step);
  job.barrier();  // no rank leaves (and ends the job) before rank 0 has saved

  const bool interrupted = stop_reason == "SIGINT" || stop_reason == "SIGTERM";
  if (!lead) return interrupted ? 128 + (stop_reason == "SIGINT" ? SIGINT : SIGTERM) : 0;
  if (!stop_reason.empty())
    std::fprintf(stderr,
                 "forge train: stopped at step %lld of %lld (%s); checkpoint saved in %s; "
                 "continue with: forge train --out %s --resume\n",
                 static_cast<long long>(step), static_cast<long long>(a.steps), stop_reason.c_str(),
                 out.c_str(), out.c_str());
  const double tok_s = step_seconds > 0 ? static_cast<double>(tokens_done) / step_seconds : 0.0;
  auto num_or_null = [](double v) {
    return std::isfinite(v) ? ordered_json(v) : ordered_json(nullptr);
  };
  if (a.json) {
    ordered_json j = {
        {"steps", step},
        {"steps_this_run", steps_done},
        {"train_loss", num_or_null(last_loss)},
        {"val_loss", num_or_null(eval_step == step ? last_val : std::nan(""))},
        {"tok_s", tok_s},
        {"checkpoint", out.string()},
        {"stopped", stop_reason.empty() ? ordered_json(nullptr) : ordered_json(stop_reason)},
        {"params", cfg.num_params()},
        {"threads", num_threads()},
        {"ranks", ranks.size},
        {"settings", settings_now}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf(
        "trained to step %lld of %lld: train loss %s, val loss %s, %.0f tok/s; "
        "checkpoint: %s\n",
        static_cast<long long>(step), static_cast<long long>(a.steps),
        std::isfinite(last_loss) ? fmt_loss(last_loss).c_str() : "-",
        eval_step == step ? fmt_loss(last_val).c_str() : "-", tok_s, out.c_str());
  }
  return interrupted ? 128 + (stop_reason == "SIGINT" ? SIGINT : SIGTERM) : 0;
}

}  // namespace

void register_train(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a GPT-2 from scratch or fine-tune one; checkpoints into --out");
  auto a = std::make_shared<TrainArgs>();
  auto settings = std::make_shared<std::vector<Setting>>();
  add_train_options(*cmd, *a, *settings);
  cmd->callback([&action, a, settings] {
    action = [a, settings]() -> int {
      try {
        return run_train(*a, *settings);
      } catch (const std::exception& e) {
        // One rank's error would leave the others waiting for it forever: end the job.
        if (dist::mpi_unavailable_reason().empty() && dist::job().size() > 1) {
          std::fprintf(stderr, "error: rank %d of %d: %s\n", dist::job().rank(), dist::job().size(),
                       e.what());
          dist::job().abort(1);
        }
        throw;
      }
    };
  });
}

}  // namespace forge::cli
