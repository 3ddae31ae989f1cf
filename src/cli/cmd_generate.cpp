// forge generate: text (or token ids) from a GPT-2 model folder, streamed as it is produced.
//
//   forge generate -m DIR (-p TEXT | --prompt-ids 1,2,3) [-n N] [--greedy | --temperature T
//       --top-k K --top-p P] [--repeat-penalty R] [--seed S] [--stop STR ...] [--truncate]
//       [--ignore-eos] [--tokenizer DIR] [--device cpu] [--json]
//
// Without --json the generated text is written to stdout as each token completes it (the
// ids, space-separated, when the folder has no tokenizer), then a newline. With --json
// nothing is streamed; one object is printed at the end:
//   {"ids": [generated ids], "text": "..." (with a tokenizer), "prompt_tokens": n,
//    "prefill_tok_s": x, "decode_tok_s": y (null when no decode step ran),
//    "stop_reason": "length" | "eos" | "stop" | "context", "truncated_tokens": n}
//
// Context: a prompt longer than n_ctx is an error unless --truncate (which keeps its last
// tokens, see GenerateOptions::truncate); generation that reaches n_ctx stops there with a
// note on stderr (no sliding window: that would silently change what the model conditions
// on).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/id_list.h"
#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/tokenizer.h"

namespace forge::cli {
namespace {

namespace fs = std::filesystem;

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  std::string tokenizer;
  std::string device = "cpu";
  int64_t n = 64;
  bool greedy = false;
  // llama.cpp's defaults: a little sharper than the raw distribution, which rambles.
  float temperature = 0.8f;
  int64_t top_k = 40;
  float top_p = 0.95f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool truncate = false;
  bool ignore_eos = false;
  bool json = false;
  bool has_prompt = false, has_prompt_ids = false;  // given at all (an empty -p counts)
};

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "generate: " + what);
}

void write_stdout(std::string_view s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size())
    throw Error(ErrorKind::Io, "generate: writing the output failed");
  std::fflush(stdout);  // streaming: the user sees each token as it comes
}

int run_generate(const GenerateArgs& a) {
  const bool has_prompt = a.has_prompt, has_ids = a.has_prompt_ids;
  if (has_prompt == has_ids)
    fail(ErrorKind::Format, "give exactly one of -p TEXT or --prompt-ids 1,2,3");
  gpt2::GenerateOptions o;
  o.max_new_tokens = a.n;
  o.sampling.greedy = a.greedy;
  o.sampling.temperature = a.temperature;
  o.sampling.top_k = a.top_k;
  o.sampling.top_p = a.top_p;
  o.sampling.repeat_penalty = a.repeat_penalty;
  o.sampling.seed = a.seed;
  o.stop = a.stop;
  o.truncate = a.truncate;
  o.stop_at_eos = !a.ignore_eos;
  o.sampling.validate();  // before the (slow) model load
  std::vector<uint32_t> prompt;
  if (has_ids) prompt = parse_id_list(a.prompt_ids, "generate", "--prompt-ids");

  std::error_code ec;
  const bool gguf = fs::is_regular_file(a.model, ec) && fs::path(a.model).extension() == ".gguf";
  if (!gguf && !fs::is_directory(a.model, ec))
    fail(ErrorKind::Io,
         "model '" + a.model + "' is neither a model folder nor a .gguf file (or does not exist)");
  std::optional<Tokenizer> tok;
  if (!a.tokenizer.empty())
    tok = Tokenizer::load(a.tokenizer);
  else if (Tokenizer::available(a.model))
    tok = Tokenizer::load(a.model);
  if (has_prompt) {
    if (!tok)
      fail(ErrorKind::Tokenizer,
           "-p needs tokenizer files (tokenizer.json, vocab.json + "
           "merges.txt, or encoder.json + vocab.bpe) in '" +
               a.model + "' or --tokenizer DIR; or give --prompt-ids");
    prompt = tok->encode(a.prompt);
    if (prompt.empty()) fail(ErrorKind::Format, "-p: the prompt is empty");
  }
  if (!o.stop.empty() && !tok)
    fail(ErrorKind::Tokenizer, "--stop needs tokenizer files (the model folder has none)");

  const gpt2::Model model = gpt2::Model::load(a.model, parse_device(a.device));
  gpt2::TokenCallback on_token;
  gpt2::TextCallback on_text;
  bool first_id = true;
  if (!a.json) {
    if (tok) {
      on_text = [](std::string_view s) { write_stdout(s); };
    } else {
      on_token = [&first_id](uint32_t id) {
        write_stdout((first_id ? "" : " ") + std::to_string(id));
        first_id = false;
        return true;
      };
    }
  }
  const gpt2::GenerateResult r =
      gpt2::generate(model, prompt, o, tok ? &*tok : nullptr, on_token, on_text);
  if (r.truncated_tokens > 0)
    std::fprintf(stderr, "note: the prompt was truncated to its last %lld tokens (%lld dropped)\n",
                 static_cast<long long>(r.prompt_tokens),
                 static_cast<long long>(r.truncated_tokens));
  if (r.stop_reason == "context")
    std::fprintf(stderr, "note: stopped at the end of the model's context (%lld positions)\n",
                 static_cast<long long>(model.config().n_ctx));

  if (!a.json) {
    write_stdout("\n");
    return 0;
  }
  const double prefill = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0.0;
  nlohmann::ordered_json j;
  j["ids"] = r.ids;
  if (tok) j["text"] = r.text;
  j["prompt_tokens"] = r.prompt_tokens;
  j["prefill_tok_s"] = prefill;
  j["decode_tok_s"] = r.decode_steps > 0 && r.decode_seconds > 0
                          ? nlohmann::ordered_json(r.decode_steps / r.decode_seconds)
                          : nlohmann::ordered_json(nullptr);
  j["stop_reason"] = r.stop_reason;
  j["truncated_tokens"] = r.truncated_tokens;
  // Text cut inside a UTF-8 character (-n ending mid-character) must still print.
  write_stdout(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate text from a GPT-2 model folder (streams to stdout; --json: one object)");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("-m,--model", a->model,
                  "Model folder (config.json + model.safetensors) or a .gguf file")
      ->required();
  CLI::Option* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text (needs a tokenizer)");
  CLI::Option* ids =
      cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids, e.g. 464,2068,7586");
  p->excludes(ids);
  cmd->add_option("-n,--max-tokens", a->n, "Tokens to generate at most")
      ->check(int_in_range(0, int64_t{1} << 30))
      ->capture_default_str();
  CLI::Option* greedy = cmd->add_flag("--greedy", a->greedy, "Always take the most likely token");
  std::vector<CLI::Option*> sampling = {
      cmd->add_option("--temperature", a->temperature, "Softmax temperature (>= 0; 0: greedy)")
          ->capture_default_str(),
      cmd->add_option("--top-k", a->top_k, "Keep the K most likely tokens (0: all)")
          ->check(int_in_range(0, int64_t{1} << 31))
          ->capture_default_str(),
      cmd->add_option("--top-p", a->top_p, "Nucleus: smallest set with probability >= P, (0, 1]")
          ->capture_default_str(),
  };
  for (CLI::Option* s : sampling) s->excludes(greedy);
  cmd->add_option("--repeat-penalty", a->repeat_penalty,
                  "HF repetition penalty over prompt and output (> 0; 1: none)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "RNG seed: the same seed gives the same output")
      ->capture_default_str();
  cmd->add_option("--stop", a->stop, "Stop when the output contains this string (repeatable)");
  cmd->add_flag("--truncate", a->truncate,
                "Keep the last tokens of a prompt longer than the context instead of failing");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-text token");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer folder (default: the model folder)");
  cmd->add_option("--device", a->device, "Device (" + device_choices() + ")")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object at the end instead of streaming");
  cmd->callback([&action, a, p, ids] {
    a->has_prompt = p->count() > 0;
    a->has_prompt_ids = ids->count() > 0;
    action = [a]() -> int { return run_generate(*a); };
  });
}

}  // namespace forge::cli
