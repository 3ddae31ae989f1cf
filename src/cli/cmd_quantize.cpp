// forge quantize: a model folder (or a GGUF file) written as a GGUF file that llama.cpp
// reads, every 2-D weight (token_embd included) in one dtype.
//
//   forge quantize -m MODEL -o OUT.gguf [--type f32|f16|bf16|q8_0|q4_0] [--tokenizer DIR]
//
// The tokenizer (the model's own files by default) goes into the file's metadata. The output
// is written atomically: a failed or killed run leaves no partial file, and an existing OUT
// stays as it was. Prints one line: the type, the tensor count and the file's size.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/quantize.h"
#include "forge/tokenizer.h"

namespace forge::cli {
namespace {

struct QuantizeArgs {
  std::string model, out, type = "q8_0", tokenizer;
};

int run_quantize(const QuantizeArgs& a) {
  const DType dtype = weight_dtype_named(a.type);  // Error(Format) naming the choices
  const std::filesystem::path out(a.out);
  if (out.extension() != ".gguf")
    throw Error(ErrorKind::Format, "quantize: -o " + a.out + ": the output must be a .gguf file");
  const gpt2::Model model = gpt2::Model::load(a.model).converted(dtype);
  const Tokenizer tok = Tokenizer::load(a.tokenizer.empty() ? a.model : a.tokenizer);
  model.save_gguf(a.out, tok, std::filesystem::path(a.model).stem().string());
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(a.out, ec);
  std::printf("wrote %s: %s weights, %.1f MiB (%.1f MiB of weights in memory)\n", a.out.c_str(),
              dtype_name(dtype), static_cast<double>(bytes) / (1 << 20),
              static_cast<double>(model.weight_bytes()) / (1 << 20));
  return 0;
}

}  // namespace

void register_quantize(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Write a model as a GGUF file (llama.cpp's format), its 2-D weights in one dtype");
  auto a = std::make_shared<QuantizeArgs>();
  cmd->add_option("-m,--model", a->model, "Model folder (or a .gguf file)")->required();
  cmd->add_option("-o,--output", a->out, "The GGUF file to write")->required();
  cmd->add_option("--type", a->type, "Weight dtype: f32, f16, bf16, q8_0 or q4_0")
      ->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer folder (default: the model's)");
  cmd->callback([&action, a] { action = [a] { return run_quantize(*a); }; });
}

}  // namespace forge::cli
