// forge eval: next-token loss and perplexity of a GPT-2 model on given tokens or a text file.
//
//   forge eval -m DIR (--ids 1,2,3,... | --text-file F) [--tokenizer DIR] [--window W]
//       [--stride S] [--device cpu] [--json]
//
// loss = mean over targets i >= 1 of -log p(t[i] | t[..i]) in nats (HF's loss with
// labels = input_ids); perplexity = exp(loss). Inputs longer than the window (default: the
// model's n_ctx) are scored in windows: each window holds W input tokens and scores the S
// (default W) next targets not scored yet, so with S = W the windows tile the input without
// overlap and every target is scored exactly once (gpt2::evaluate documents the scheme).
// Output: "loss 3.2100 nats, perplexity 24.78 (...)" or with --json one object
//   {"loss": x, "perplexity": y, "tokens": n, "predictions": n - 1, "windows": k,
//    "window": W, "stride": S}.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/id_list.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/tokenizer.h"

namespace forge::cli {
namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string model;
  std::string ids;
  std::string text_file;
  std::string tokenizer;
  std::string device = "cpu";
  int64_t window = 0;
  int64_t stride = 0;
  bool json = false;
};

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "eval: " + what);
}

/// The whole file as bytes; refuses files over 1 GiB (the ids alone would outgrow memory
/// long before anything useful came of it).
std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail(ErrorKind::Io, "--text-file: no file at '" + path + "'");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail(ErrorKind::Io, "--text-file: cannot read '" + path + "': " + ec.message());
  if (size > (uintmax_t{1} << 30))
    fail(ErrorKind::Format, "--text-file: '" + path + "' is larger than 1 GiB");
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (!f && !f.eof()) fail(ErrorKind::Io, "--text-file: cannot read '" + path + "'");
  return ss.str();
}

int run_eval(const EvalArgs& a, bool has_ids, bool has_text) {
  if (has_ids == has_text) fail(ErrorKind::Format, "give exactly one of --ids or --text-file");
  std::error_code ec;
  const bool gguf = fs::is_regular_file(a.model, ec) && fs::path(a.model).extension() == ".gguf";
  if (!gguf && !fs::is_directory(a.model, ec))
    fail(ErrorKind::Io,
         "model '" + a.model + "' is neither a model folder nor a .gguf file (or does not exist)");
  std::vector<uint32_t> ids;
  if (has_ids) {
    ids = parse_id_list(a.ids, "eval", "--ids");
  } else {
    const Tokenizer tok = Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer);
    ids = tok.encode(read_text_file(a.text_file));
  }
  if (ids.size() < 2)
    fail(ErrorKind::Format, "need at least 2 tokens to score, got " + std::to_string(ids.size()));

  const gpt2::Model model = gpt2::Model::load(a.model, parse_device(a.device));
  gpt2::EvalOptions o;
  o.window = a.window;
  o.stride = a.stride;
  const gpt2::EvalResult r = gpt2::evaluate(model, ids, o);
  const int64_t window = a.window > 0 ? a.window : model.config().n_ctx;
  const int64_t stride = a.stride > 0 ? a.stride : window;
  if (a.json) {
    nlohmann::ordered_json j;
    j["loss"] = r.loss;
    j["perplexity"] = r.perplexity;
    j["tokens"] = r.tokens;
    j["predictions"] = r.predictions;
    j["windows"] = r.windows;
    j["window"] = window;
    j["stride"] = stride;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "loss %.6f nats, perplexity %.4f (%lld tokens, %lld predictions, %lld window%s "
        "of %lld, stride %lld)\n",
        r.loss, r.perplexity, static_cast<long long>(r.tokens),
        static_cast<long long>(r.predictions), static_cast<long long>(r.windows),
        r.windows == 1 ? "" : "s", static_cast<long long>(window), static_cast<long long>(stride));
  }
  return 0;
}

}  // namespace

void register_eval(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "Loss (nats) and perplexity of a GPT-2 model folder on token ids or a text file");
  auto a = std::make_shared<EvalArgs>();
  cmd->add_option("-m,--model", a->model,
                  "Model folder (config.json + model.safetensors) or a .gguf file")
      ->required();
  CLI::Option* ids = cmd->add_option("--ids", a->ids, "Token ids, e.g. 464,2068,7586");
  CLI::Option* text = cmd->add_option("--text-file", a->text_file, "Text file to tokenize");
  ids->excludes(text);
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer folder (default: the model folder)");
  cmd->add_option("--window", a->window, "Input tokens per window (default: n_ctx)")
      ->check(int_in_range(1, int64_t{1} << 30));
  cmd->add_option("--stride", a->stride,
                  "New targets scored per window, 1..window (default: window = no overlap)")
      ->check(int_in_range(1, int64_t{1} << 30));
  cmd->add_option("--device", a->device, "Device (" + device_choices() + ")")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([&action, a, ids, text] {
    const bool has_ids = ids->count() > 0, has_text = text->count() > 0;
    action = [a, has_ids, has_text]() -> int { return run_eval(*a, has_ids, has_text); };
  });
}

}  // namespace forge::cli
