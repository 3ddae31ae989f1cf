// The forge CLI's subcommands. Each lives in its own cmd_*.cpp and registers itself on the
// CLI11 app; main.cpp wires them and turns forge::Error into "error: ..." + exit 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "forge/devices.h"

namespace forge::cli {

/// A subcommand's action runs after parsing; it returns the process exit code.
using Action = std::function<int()>;

/// Each register_* adds one subcommand to `app` and stores its action in `action` when the
/// user picks it.
void register_devices(CLI::App& app, Action& action);
void register_bench(CLI::App& app, Action& action);  // --op NAME | --preset NAME
void register_generate(CLI::App& app, Action& action);
void register_tokenize(CLI::App& app, Action& action);  // tokenize and detokenize
void register_eval(CLI::App& app, Action& action);
void register_train(CLI::App& app, Action& action);  // cmd_train.cpp
void register_plot(CLI::App& app, Action& action);   // cmd_plot.cpp: loss.svg from metrics
void register_quantize(CLI::App& app, Action& action);  // cmd_quantize.cpp: GGUF files
void register_serve(CLI::App& app, Action& action);     // cmd_serve.cpp: OpenAI-compatible HTTP

/// Settings of `forge bench --preset`: a random-init GPT-2 of the preset's shapes.
struct ModelBenchOptions {
  std::string preset = "gpt2";
  std::string model;          // --model: a model folder or .gguf file instead of the preset
  std::string dtype = "f32";  // --dtype: the preset's random weights in this dtype
  int prompt_tokens = 128;
  int decode_tokens = 64;
  int batch = 1;
  std::string device = "cpu";
  std::string precision = "fp32";  // --precision: the device's matrix products (devices.h)
  bool json = false;
  bool profile = false;  // also time each op of a prefill and a decode step (cmd_bench_model.cpp)
  // Training: optimizer steps (train::Trainer::step) of train_batch x train_seq random
  // tokens (llm.c's CPU setting; seq is capped at the context); a warm-up step, then the
  // median of train_steps timed ones. train_steps 0: no training benchmark.
  int train_batch = 4;
  int train_seq = 64;
  int train_steps = 3;
};
/// Runs the model benchmark (cmd_bench_model.cpp) and prints its report.
int bench_model(const ModelBenchOptions& options);

/// Settings of `forge bench --op NAME` for the ops other than matmul (bench_op.cpp): the op
/// at GPT-2 124M's shapes over `rows` tokens.
struct OpBenchOptions {
  std::string op;
  int64_t rows = 1024;
  int repeat = 10;
  std::string device = "cpu";
  bool json = false;
};
/// Times the op and prints its report; Error(Format) for a name that is not an op.
int bench_op(const OpBenchOptions& options);
/// The names --op takes: every op of the op table.
std::vector<std::string> bench_op_names();

}  // namespace forge::cli
