// fuzz_seeds OUT: writes valid inputs for every harness into OUT/<harness>/ (the files each
// corpus in fuzz/corpus/ grew from), made by forge's own writers, and OUT/cli_args.dict,
// every option and subcommand name of the command line (fuzz/dict/cli_args.dict).
// fuzz/run.sh seeds runs it and merges the result into the corpora.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/app.h"
#include "forge/data.h"
#include "forge/gguf.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"
#include "forge/tokenizer.h"
#include "forge/train.h"
#include "harness_util.h"
#include "text/tokenizer_impl.h"
#include "tokenizer_checks.h"

using namespace forge;
namespace fs = std::filesystem;

namespace {

std::string out_root;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void seed(const std::string& harness, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_root + "/" + harness);
  std::ofstream(out_root + "/" + harness + "/" + name, std::ios::binary) << bytes;
}

std::string join_parts(const std::string& a, const std::string& b) {
  return a + std::string(fuzz::kPartSeparator) + b;
}

// A byte-level BPE of 256 byte tokens, a few merges and <|endoftext|>: small enough to fuzz.
Tokenizer small_bpe() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(text::byte_level_encode(std::string(1, char(b))));
  const std::vector<std::string> merges = {"h e", "l l", "\xc4\xa0 t", "he ll", "\xc4\xa0t h"};
  for (const std::string& m : merges) {
    const size_t space = m.find(' ');
    tokens.push_back(m.substr(0, space) + m.substr(space + 1));
  }
  tokens.push_back("<|endoftext|>");
  std::vector<int64_t> types(tokens.size(), 1);
  types.back() = 3;
  return Tokenizer::from_token_list(tokens, merges, types, "fuzz seed");
}

void safetensors_seeds(const std::string& tmp) {
  const gpt2::Model model = gpt2::Model::random(fuzz::small_model_config(), 1);
  model.save(tmp + "/model");
  seed("fuzz_safetensors", "small_model.safetensors", read_file(tmp + "/model/model.safetensors"));
  const uint16_t halves[4] = {0x3c00, 0xc000, 0x7c00, 0x0001};  // F16 1, -2, inf, subnormal
  const uint16_t bhalves[2] = {0x3f80, 0xff80};                 // BF16 1, -inf
  save_safetensors(tmp + "/dtypes.safetensors",
                   {{"f16", Tensor::from_bytes(halves, sizeof halves, {2, 2}, DType::F16)},
                    {"bf16", Tensor::from_bytes(bhalves, sizeof bhalves, {2}, DType::BF16)},
                    {"u32", Tensor::from_vector(std::vector<uint32_t>{1, 2, 3}, {3})},
                    {"empty", Tensor::zeros({0, 4})}},
                   {{"format", "pt"}});
  seed("fuzz_safetensors", "dtypes.safetensors", read_file(tmp + "/dtypes.safetensors"));

  nlohmann::ordered_json index = {{"metadata", {{"total_size", 52}}},
                                  {"weight_map",
                                   {{"a", "model-00001-of-00002.safetensors"},
                                    {"b", "model-00001-of-00002.safetensors"},
                                    {"c", "model-00002-of-00002.safetensors"}}}};
  seed("fuzz_safetensors_index", "two_shards.json", index.dump(2));
}

void model_seeds(const std::string& tmp) {
  seed("fuzz_config", "small_model.json", fuzz::small_model_config().to_json());
  seed("fuzz_config", "gpt2.json", gpt2::Config::preset("gpt2").to_json());
  seed("fuzz_config", "tiny.json", gpt2::Config::preset("tiny").to_json());

  gpt2::Model small = gpt2::Model::random(fuzz::small_model_config(), 2);
  small.save_gguf(tmp + "/small.gguf", Tokenizer());
  seed("fuzz_gguf", "small_f32.gguf", read_file(tmp + "/small.gguf"));
  gpt2::Config with_vocab = fuzz::small_model_config();
  with_vocab.vocab_size = small_bpe().vocab_size();
  with_vocab.n_embd = 32;
  with_vocab.bos_id = with_vocab.eos_id = with_vocab.vocab_size - 1;
  const gpt2::Model bpe_model = gpt2::Model::random(with_vocab, 3);
  bpe_model.save_gguf(tmp + "/bpe.gguf", small_bpe());
  seed("fuzz_gguf", "bpe_f32.gguf", read_file(tmp + "/bpe.gguf"));
  bpe_model.converted(DType::Q8_0).save_gguf(tmp + "/q8.gguf", small_bpe());
  seed("fuzz_gguf", "bpe_q8_0.gguf", read_file(tmp + "/q8.gguf"));

  train::Hyper hyper;
  hyper.steps = 10;
  hyper.batch = 1;
  hyper.seq = 8;
  train::Trainer trainer(small, hyper);
  std::vector<uint32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  data::Batch batch{Tensor::from_vector(std::vector<uint32_t>(ids.begin(), ids.end() - 1), {1, 8}),
                    Tensor::from_vector(std::vector<uint32_t>(ids.begin() + 1, ids.end()), {1, 8})};
  trainer.step({batch});
  trainer.save_state(tmp + "/state.safetensors", {{"sampler", "1"}});
  seed("fuzz_train_state", "after_one_step.safetensors", read_file(tmp + "/state.safetensors"));
}

void tokenizer_seeds(const std::string& tmp) {
  const Tokenizer bpe = small_bpe();
  bpe.save(tmp + "/bpe");
  const std::string vocab = read_file(tmp + "/bpe/vocab.json");
  const std::string merges = read_file(tmp + "/bpe/merges.txt");
  std::string hf = join_parts(vocab, merges);  // even size: vocab.json + merges.txt
  std::string openai = hf;                     // odd size: encoder.json + vocab.bpe
  (hf.size() % 2 ? hf : openai) += "\n";
  seed("fuzz_tokenizer_vocab_merges", "hf.txt", hf);
  seed("fuzz_tokenizer_vocab_merges", "openai.txt", openai);

  nlohmann::ordered_json tj;
  tj["version"] = "1.0";
  tj["added_tokens"] = {
      {{"id", bpe.vocab_size() - 1}, {"content", "<|endoftext|>"}, {"special", true}}};
  nlohmann::ordered_json v = nlohmann::ordered_json::parse(vocab);
  const Tokenizer::TokenList list = bpe.token_list();
  tj["model"] = {{"type", "BPE"}, {"vocab", v}, {"merges", list.merges}};
  std::string json = tj.dump();
  if (json.size() % 2) json += " ";  // even: read as tokenizer.json
  seed("fuzz_tokenizer_json", "tokenizer.json", json);
  Tokenizer::build_char("hello w\xc3\xb6rld \xff").save(tmp + "/char");
  std::string chars = read_file(tmp + "/char/tokenizer_char.json");
  if (chars.size() % 2 == 0) chars += " ";  // odd: read as tokenizer_char.json
  seed("fuzz_tokenizer_json", "tokenizer_char.json", chars);
}

void text_seeds() {
  const std::vector<std::string> texts = {
      "Hello, my dog is cute",
      "It's what they've said: we'll see, I'd think, you're right, I'm here.",
      "  many   spaces\t\ttabs\n\n\nnewlines \r\n end  ",
      "numbers 123 4567 \xd9\xa3\xd9\xa4 ½ and <|endoftext|> then more",
      "\xc3\xbcn\xc3\xaf"
      "c\xc3\xb6"
      "d\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\xf0\x9f\x91\x8d",
      "invalid \xff\xfe bytes \xc3 and \xe2\x82 cut \xf0\x9f",
  };
  const Tokenizer& gpt2 = fuzz::gpt2_tokenizer();
  for (size_t i = 0; i < texts.size(); ++i) {
    seed("fuzz_bpe_text", "text" + std::to_string(i) + ".txt", texts[i]);
    std::string ids;
    for (uint32_t id : gpt2.encode(texts[i])) {
      ids += char(id & 0xff);
      ids += char(id >> 8);
    }
    seed("fuzz_stream_decode", "ids" + std::to_string(i) + ".bin", ids);
  }
}

void token_file_seeds(const std::string& tmp) {
  data::write_token_file(tmp + "/v1.bin", std::vector<uint32_t>{1, 2, 3, 50256, 7});
  seed("fuzz_token_file", "version1.bin", read_file(tmp + "/v1.bin"));
  data::write_token_file(tmp + "/v2.bin", std::vector<uint32_t>{70000, 1, 2});
  seed("fuzz_token_file", "version2.bin", read_file(tmp + "/v2.bin"));
}

std::string args(std::initializer_list<std::string> list) {
  std::string out;
  for (const std::string& a : list) out += (out.empty() ? "" : std::string(1, '\0')) + a;
  return out;
}

// Seeds of command lines, and a dictionary of every name the app knows.
void cli_seeds() {
  seed("fuzz_cli_args", "generate.bin",
       args({"generate", "-m", "model", "--prompt-ids", "464,2068, 7586", "--max-tokens", "16",
             "--temperature", "0.8", "--top-k", "40", "--seed", "7", "--device", "cpu"}));
  seed("fuzz_cli_args", "train.bin",
       args({"train", "--data",      "corpus.txt", "--preset", "tiny",  "--steps",   "10",
             "--lr",  "3e-4",        "--batch",    "4",        "--seq", "32",        "--dropout",
             "0.1",   "--precision", "tf32",       "--out",    "run",   "--threads", "2"}));
  seed("fuzz_cli_args", "bench.bin",
       args({"bench", "--op", "matmul", "-M", "64", "-N", "64", "-K", "64", "--device", "cuda:1"}));
  seed("fuzz_cli_args", "eval.bin", args({"eval", "-m", "model", "--ids", "1,2,3", "--json"}));
  seed("fuzz_cli_args", "tokenize.bin", args({"tokenize", "--text", "hi there"}));
  seed("fuzz_cli_args", "version.bin", args({"--version"}));

  CLI::App app{"forge", "forge"};
  int threads = 0;
  cli::Action action;
  cli::build_app(app, threads, action);
  std::ofstream dict(out_root + "/cli_args.dict");
  dict << "# Every subcommand and option name of forge's command line (fuzz_seeds writes it).\n";
  std::vector<CLI::App*> apps = {&app};
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    dict << "\"" << sub->get_name() << "\"\n";
    apps.push_back(sub);
  }
  for (CLI::App* a : apps)
    for (const CLI::Option* o : a->get_options()) {
      for (const std::string& name : o->get_lnames()) dict << "\"--" << name << "\"\n";
      for (const std::string& name : o->get_snames()) dict << "\"-" << name << "\"\n";
    }
  dict << "\"\\x00\"\n\"cpu\"\n\"cuda:0\"\n\"vulkan\"\n\"1e9\"\n\"-1\"\n\"nan\"\n\"inf\"\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR\n");
    return 1;
  }
  out_root = argv[1];
  const std::string tmp = fuzz::scratch_dir();
  try {
    safetensors_seeds(tmp);
    model_seeds(tmp);
    tokenizer_seeds(tmp);
    text_seeds();
    token_file_seeds(tmp);
    cli_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
