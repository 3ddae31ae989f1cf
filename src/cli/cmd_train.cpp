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
#include <fcntl.h>
#include <sys/file.h>
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
#include "forge/data.h"
#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"
#include "forge/threads.h"
#include "forge/tokenizer.h"
#include "forge/train.h"
#include "forge/version.h"
#include "io/atomic_file.h"

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

// ---- settings -------------------------------------------------------------------------

struct TrainArgs {
  std::string data, out, tokenizer, preset, init_from, device = "cpu";
  double val_fraction = 0.1;
  int64_t layers = 0, heads = 0, embd = 0, ctx = 0;  // 0: the preset's
  // llm.c's CPU default is B = 4, T = 64; nanoGPT's is larger, for a GPU. Hyper's are the
  // library's (nanoGPT's optimizer settings); batch and seq here suit a CPU.
  int64_t batch = 8, micro_batch = 0, seq = 0, steps = 1000, warmup = 0;
  double lr = 6e-4, weight_decay = 0.1, clip = 1.0, dropout = 0.0;
  uint64_t seed = 1337;
  int64_t eval_every = 100, eval_batches = 20, sample_every = 200, sample_tokens = 64;
  int64_t save_every = 250, stop_after = 0;
  bool resume = false, json = false;
};

/// How an option behaves on --resume.
enum class OnResume {
  Fixed,  // part of the trajectory: must equal the checkpoint's value
  Input,  // names the data/tokenizer/initial model: checked through the data fingerprint
  Free,   // may change between runs (eval, sampling, checkpoint cadence, output)
};

/// One command-line setting: its settings-JSON key, its option, and access to its value.
struct Setting {
  std::string key;
  CLI::Option* option = nullptr;
  OnResume on_resume = OnResume::Fixed;
  std::function<ordered_json(const TrainArgs&)> get;
  std::function<void(TrainArgs&, const ordered_json&)> set;
};

template <class T>
Setting setting(const std::string& key, T TrainArgs::*member, OnResume on_resume) {
  return Setting{key, nullptr, on_resume,
                 [member](const TrainArgs& a) { return ordered_json(a.*member); },
                 [member](TrainArgs& a, const ordered_json& j) { a.*member = j.get<T>(); }};
}

ordered_json settings_json(const TrainArgs& a, const std::vector<Setting>& settings) {
  ordered_json j = ordered_json::object();
  for (const Setting& s : settings) j[s.key] = s.get(a);
  return j;
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
    if (!has_tokenizer_files(env))
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
    if (has_tokenizer_files(dir)) return fs::weakly_canonical(dir, ec).string();
  return "";
}

/// Replaces `path` atomically with `text`.
void write_file_atomic(const fs::path& path, const std::string& text) {
  io::AtomicFile f(path.string(), "train");
  f.write(text.data(), text.size());
  f.commit();
}

/// Appends one line with a single write(), so a kill leaves either the whole line or none
/// of it (and a resume rewrites the file anyway).
void append_line(const fs::path& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorKind::Io, "cannot open " + path.string() + " for appending");
  const std::string text = line + "\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    fail(ErrorKind::Io, "cannot append to " + path.string() + " (disk full?)");
}

/// Removes temp files that an earlier process killed mid-write left in OUT ("<name>.tmp.<pid>",
/// io::AtomicFile's naming). Called while holding OUT's lock, so none belongs to a live run.
void remove_stale_temp_files(const fs::path& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    const size_t pos = name.rfind(".tmp.");
    if (pos == std::string::npos || pos + 5 >= name.size()) continue;
    if (name.find_first_not_of("0123456789", pos + 5) != std::string::npos) continue;
    std::error_code rm;
    if (e.is_regular_file(rm)) fs::remove(e.path(), rm);
  }
}

constexpr const char* kStagingDir = ".model_staging";

/// Writes config.json + model.safetensors so that each replaces its old version atomically.
/// gpt2::Model::save rewrites config.json in place, so it saves into a staging folder in
/// OUT and each file is then renamed over its final name (after an fsync, so that a rename
/// never publishes data that is not on disk).
void save_model_atomically(const gpt2::Model& model, const fs::path& out) {
  const fs::path stage = out / kStagingDir;
  std::error_code ec;
  fs::remove_all(stage, ec);
  try {
    model.save(stage.string());
    for (const char* name : {"model.safetensors", "config.json"}) {
      const fs::path from = stage / name;
      const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
      const bool synced = fd >= 0 && ::fsync(fd) == 0;
      if (fd >= 0) ::close(fd);
      if (!synced) fail(ErrorKind::Io, "cannot sync " + from.string());
      fs::rename(from, out / name, ec);
      if (ec)
        fail(ErrorKind::Io,
             "cannot move " + from.string() + " to " + (out / name).string() + ": " + ec.message());
    }
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
  fs::remove_all(stage, ec);
}

/// An exclusive lock on OUT for the process's life: two runs writing one folder would
/// corrupt each other's checkpoints.
void lock_out_dir(const fs::path& out) {
  const fs::path lock = out / ".forge_train.lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorKind::Io, "cannot create " + lock.string());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    fail(ErrorKind::Io, "another forge train is writing " + out.string());
  }
  // The descriptor stays open (and the lock held) until the process exits.
}

// ---- signals ----------------------------------------------------------------------------

volatile std::sig_atomic_t g_signal = 0;

void write_stderr(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, s, n);
}

void on_stop_signal(int sig) {
  if (g_signal != 0) {
    // Every file is replaced atomically, so exiting here loses only the unsaved steps.
    write_stderr("\nforge train: second signal: exiting now (the last checkpoint is intact)\n");
    ::_exit(128 + sig);
  }
  g_signal = sig;
  write_stderr(
      "\nforge train: finishing this step, then saving a checkpoint (signal again to quit "
      "at once)\n");
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// ---- metrics ----------------------------------------------------------------------------

struct MetricsLog {
  fs::path path;
  LossPoints train, val;

  void add(const ordered_json& rec) {
    const double step = rec["step"].get<double>();
    if (rec["loss"].is_number()) train.emplace_back(step, rec["loss"].get<double>());
    if (rec.contains("val_loss") && rec["val_loss"].is_number())
      val.emplace_back(step, rec["val_loss"].get<double>());
  }

  /// Keeps the records of steps <= `step` (a resumed run's file then continues exactly
  /// where the checkpoint was taken); drops everything from the first unreadable line on.
  void truncate_to(int64_t step) {
    std::ifstream f(path, std::ios::binary);
    std::string kept, line;
    while (f && std::getline(f, line)) {
      ordered_json rec;
      try {
        rec = ordered_json::parse(line);
      } catch (const std::exception&) {
        break;  // a line cut by a kill: nothing after it can be trusted
      }
      if (!rec.is_object() || !rec.contains("step") || !rec["step"].is_number_integer() ||
          rec["step"].get<int64_t>() > step)
        break;
      add(rec);
      kept += line + "\n";
    }
    write_file_atomic(path, kept);
  }

  void append(const ordered_json& rec) {
    append_line(path, rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    add(rec);
  }
};

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
    p.init = gpt2::Model::load(a.init_from, parse_device(a.device));
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
  if (a.out.empty()) fail(ErrorKind::Format, "--out must name a folder");
  const fs::path out = a.out;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (!fs::is_directory(out, ec))
    fail(ErrorKind::Io, "cannot create the output folder " + out.string());
  lock_out_dir(out);
  remove_stale_temp_files(out);
  fs::remove_all(out / kStagingDir, ec);  // a save that a kill interrupted
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
  if (!(a.val_fraction >= 0.0 && a.val_fraction <= 0.5))
    fail(ErrorKind::Range,
         "--val-fraction must be in [0, 0.5], got " + std::to_string(a.val_fraction));

  // Tokenizer: --tokenizer, else (fine-tuning) the model's own, else GPT-2's default files.
  std::error_code dec;
  const bool token_file = data::is_token_file(a.data);
  if (a.tokenizer.empty() && !token_file) {
    if (!a.init_from.empty() && has_tokenizer_files(a.init_from))
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
  // Tokenizing a large text takes a while (once: the tokens are cached in OUT).
  std::fprintf(stderr, "forge train: loading %s\n", a.data.c_str());
  data::Dataset dataset = data::load(dopt);
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
  train::Trainer trainer(model, h);

  // The sampler shares the training tokens (moved, not copied: they may be large).
  const auto train_tokens = std::make_shared<const std::vector<uint32_t>>(std::move(dataset.train));
  data::BatchSampler sampler(train_tokens, a.micro_batch, a.seq, a.seed);
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

  MetricsLog metrics{out / kMetricsFile, {}, {}};
  metrics.truncate_to(first_step);  // a fresh run: an empty file

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
    save_model_atomically(model, out);
    if (tok && !tokenizer_saved) {
      tok->save(out.string());
      tokenizer_saved = true;
    }
    write_file_atomic(out / kPlotFile, loss_plot_svg(metrics.train, metrics.val, plot_title));
    saved_step = step;
  };

  const bool tty = ::isatty(STDERR_FILENO) != 0;
  Progress progress(a.steps, first_step, stderr, tty);
  std::fprintf(stderr,
               "forge train: %.2fM parameters (%lld layers, %lld heads, %lld wide, ctx %lld, "
               "vocab %lld); %zu train + %zu val tokens; batch %lld x %lld tokens%s; %d "
               "thread%s\n",
               static_cast<double>(cfg.num_params()) / 1e6, static_cast<long long>(cfg.n_layer),
               static_cast<long long>(cfg.n_head), static_cast<long long>(cfg.n_embd),
               static_cast<long long>(cfg.n_ctx), static_cast<long long>(cfg.vocab_size),
               train_tokens->size(), dataset.val.size(), static_cast<long long>(a.batch),
               static_cast<long long>(a.seq),
               a.micro_batch < a.batch
                   ? (" (micro-batches of " + std::to_string(a.micro_batch) + ")").c_str()
                   : "",
               num_threads(), num_threads() == 1 ? "" : "s");
  if (a.resume)
    std::fprintf(stderr, "forge train: resuming at step %lld of %lld%s\n",
                 static_cast<long long>(first_step), static_cast<long long>(a.steps),
                 first_step >= a.steps ? " (the run is already complete)" : "");
  if (val_batches.empty() && a.val_fraction > 0)
    std::fprintf(stderr,
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

  install_signal_handlers();
  double last_val = std::nan(""), last_loss = std::nan("");
  double step_seconds = 0;
  int64_t tokens_done = 0, steps_done = 0, eval_step = -1;
  int64_t step = first_step;
  std::string stop_reason;
  const int64_t micro_steps = a.batch / a.micro_batch;
  while (step < a.steps) {
    std::vector<data::Batch> micro;
    micro.reserve(static_cast<size_t>(micro_steps));
    for (int64_t i = 0; i < micro_steps; ++i) micro.push_back(sampler.next());
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
    if (!val_batches.empty() &&
        ((a.eval_every > 0 && step % a.eval_every == 0) || step == a.steps)) {
      last_val = trainer.evaluate(val_batches);
      eval_step = step;
      rec["val_loss"] = last_val;
      progress.note("step " + std::to_string(step) + ": val loss " + fmt_loss(last_val));
    }
    metrics.append(rec);
    if (a.sample_every > 0 && step % a.sample_every == 0) sample(step);

    if (g_signal != 0) {
      stop_reason = g_signal == SIGINT ? "SIGINT" : "SIGTERM";
      break;
    }
    if (a.stop_after > 0 && steps_done >= a.stop_after && step < a.steps) {
      stop_reason = "--stop-after";
      break;
    }
    if (a.save_every > 0 && step % a.save_every == 0 && step < a.steps) save(step);
  }
  progress.finish();
  if (saved_step != step || !fs::exists(out / "model.safetensors", ec)) save(step);

  const bool interrupted = stop_reason == "SIGINT" || stop_reason == "SIGTERM";
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
  const int64_t big = int64_t{1} << 40;
  auto add = [&](Setting s, CLI::Option* opt) {
    s.option = opt;
    settings->push_back(std::move(s));
    return opt;
  };
  using R = OnResume;
  // Data and model.
  add(setting("data", &TrainArgs::data, R::Input),
      cmd->add_option("--data", a->data,
                      "A text file, a folder of .txt files, or a token file (llm.c layout)"));
  cmd->add_option("--out", a->out, "Output folder: checkpoints, metrics.jsonl, loss.svg")
      ->required();
  add(setting("tokenizer", &TrainArgs::tokenizer, R::Input),
      cmd->add_option("--tokenizer", a->tokenizer,
                      "GPT-2 BPE tokenizer folder, or 'char' for a character vocabulary of the "
                      "data (default: GPT-2's files from scripts/fetch_tokenizer.sh, or the "
                      "--init-from model's)"));
  add(setting("val_fraction", &TrainArgs::val_fraction, R::Fixed),
      cmd->add_option("--val-fraction", a->val_fraction,
                      "The last fraction of the tokens, in [0, 0.5], is the validation split")
          ->capture_default_str());
  add(setting("preset", &TrainArgs::preset, R::Fixed),
      cmd->add_option("--preset", a->preset,
                      "Model shapes: tiny, mini, gpt2, gpt2-medium, ... (default: mini)"));
  add(setting("layers", &TrainArgs::layers, R::Fixed),
      cmd->add_option("--layers", a->layers, "Transformer blocks (overrides the preset's)")
          ->check(int_in_range(1, 1024)));
  add(setting("heads", &TrainArgs::heads, R::Fixed),
      cmd->add_option("--heads", a->heads, "Attention heads (overrides the preset's)")
          ->check(int_in_range(1, 1024)));
  add(setting("embd", &TrainArgs::embd, R::Fixed),
      cmd->add_option("--embd", a->embd, "Embedding width (overrides the preset's)")
          ->check(int_in_range(1, 1 << 16)));
  add(setting("ctx", &TrainArgs::ctx, R::Fixed),
      cmd->add_option("--ctx", a->ctx, "Context positions (overrides the preset's)")
          ->check(int_in_range(1, 1 << 20)));
  add(setting("init_from", &TrainArgs::init_from, R::Input),
      cmd->add_option("--init-from", a->init_from,
                      "Fine-tune this HF GPT-2 model folder instead of a random init"));
  // Optimization.
  add(setting("batch", &TrainArgs::batch, R::Fixed),
      cmd->add_option("-b,--batch", a->batch, "Sequences per optimizer step")
          ->check(int_in_range(1, 1 << 20))
          ->capture_default_str());
  add(setting("micro_batch", &TrainArgs::micro_batch, R::Fixed),
      cmd->add_option("--micro-batch", a->micro_batch,
                      "Sequences per forward/backward (gradient accumulation; must divide "
                      "--batch; default: --batch)")
          ->check(int_in_range(1, 1 << 20)));
  add(setting("seq", &TrainArgs::seq, R::Fixed),
      cmd->add_option("-t,--seq", a->seq, "Tokens per sequence (default: the context)")
          ->check(int_in_range(1, 1 << 20)));
  add(setting("steps", &TrainArgs::steps, R::Fixed),
      cmd->add_option("--steps", a->steps, "Optimizer steps of the whole run")
          ->check(int_in_range(1, big))
          ->capture_default_str());
  add(setting("lr", &TrainArgs::lr, R::Fixed),
      cmd->add_option("--lr", a->lr, "Peak learning rate (cosine decay to 10% at --steps)")
          ->capture_default_str());
  add(setting("warmup", &TrainArgs::warmup, R::Fixed),
      cmd->add_option("--warmup", a->warmup, "Linear warmup steps")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("weight_decay", &TrainArgs::weight_decay, R::Fixed),
      cmd->add_option("--weight-decay", a->weight_decay, "AdamW weight decay (matrices only)")
          ->capture_default_str());
  add(setting("clip", &TrainArgs::clip, R::Fixed),
      cmd->add_option("--clip", a->clip, "Global grad-norm clip (0: off)")->capture_default_str());
  add(setting("dropout", &TrainArgs::dropout, R::Fixed),
      cmd->add_option("--dropout", a->dropout, "Dropout probability, in [0, 1)")
          ->capture_default_str());
  add(setting("seed", &TrainArgs::seed, R::Fixed),
      cmd->add_option("--seed", a->seed, "Seed of the init, the batches and dropout")
          ->capture_default_str());
  // Around the step: free to change on resume.
  add(setting("eval_every", &TrainArgs::eval_every, R::Free),
      cmd->add_option("--eval-every", a->eval_every,
                      "Validation loss every N steps (and at the end; 0: only at the end)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("eval_batches", &TrainArgs::eval_batches, R::Free),
      cmd->add_option("--eval-batches", a->eval_batches,
                      "Validation batches per evaluation, at most (0: the whole split)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("sample_every", &TrainArgs::sample_every, R::Free),
      cmd->add_option("--sample-every", a->sample_every,
                      "Print a generated sample every N steps (0: never)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("sample_tokens", &TrainArgs::sample_tokens, R::Free),
      cmd->add_option("--sample-tokens", a->sample_tokens, "Tokens per sample")
          ->check(int_in_range(1, 1 << 20))
          ->capture_default_str());
  add(setting("save_every", &TrainArgs::save_every, R::Free),
      cmd->add_option("--save-every", a->save_every,
                      "Checkpoint every N steps (and at the end, and on Ctrl-C; 0: only then)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  cmd->add_option("--stop-after", a->stop_after,
                  "Train at most N steps in this run, then checkpoint and exit 0 (for "
                  "time-limited jobs; continue with --resume)")
      ->check(int_in_range(1, big));
  cmd->add_flag("--resume", a->resume, "Continue the run in --out from its training state");
  cmd->add_option("--device", a->device, "Device (" + device_choices() + ")")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the final summary as one JSON object on stdout");
  cmd->callback([&action, a, settings] {
    action = [a, settings]() -> int { return run_train(*a, *settings); };
  });
}

}  // namespace forge::cli
