// forge train's command line: its arguments, and how each setting behaves on --resume
// (train_args.cpp defines the options).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace forge::cli {

using nlohmann::ordered_json;

struct TrainArgs {
  std::string data, out, tokenizer, preset, init_from, device = "cpu";
  std::string sum_timeline;        // --sum-timeline (not a setting: no effect on the trajectory)
  std::string precision = "fp32";  // the matrix products' arithmetic (a device setting)
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
  // The value a state file written before this setting existed stands for (null: none; such
  // a file cannot be resumed).
  ordered_json absent;
};

template <class T>
Setting setting(const std::string& key, T TrainArgs::*member, OnResume on_resume) {
  return Setting{key, nullptr, on_resume,
                 [member](const TrainArgs& a) { return ordered_json(a.*member); },
                 [member](TrainArgs& a, const ordered_json& j) { a.*member = j.get<T>(); },
                 nullptr};
}

inline ordered_json settings_json(const TrainArgs& a, const std::vector<Setting>& settings) {
  ordered_json j = ordered_json::object();
  for (const Setting& s : settings) j[s.key] = s.get(a);
  return j;
}

/// Every option of `forge train` on `cmd`, writing into `a`; the settings that the state
/// file records (all but --out, --stop-after, --resume, --device, --json) into `settings`.
void add_train_options(CLI::App& cmd_app, TrainArgs& a, std::vector<Setting>& settings);

}  // namespace forge::cli
