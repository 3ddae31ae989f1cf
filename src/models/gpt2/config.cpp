// GPT-2 configuration: presets, HF config.json parsing and writing, validation.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "forge/error.h"
#include "forge/gpt2.h"

namespace forge::gpt2 {
namespace {

// Caps that no real GPT-2 comes near (gpt2-xl: 48 layers, 1600 wide, 1.6e9 parameters)
// but that keep a hostile config.json from asking for unbounded memory.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxEmbd = 65536;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxCtx = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxParams = int64_t{1} << 35;

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "gpt2::Config: " + what);
}

Config make(int64_t layers, int64_t heads, int64_t embd, int64_t ctx, int64_t vocab,
            int64_t special) {
  Config c;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = embd;
  c.n_ctx = ctx;
  c.vocab_size = vocab;
  c.bos_id = special;
  c.eos_id = special;
  return c;
}

// An integer field: absent -> false; present but not an integer -> Error(Format).
bool read_int(const nlohmann::json& j, const char* key, const std::string& source, int64_t& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_number_integer())
    fail(ErrorKind::Format, source + ": \"" + key + "\" must be an integer, got " + it->dump());
  out = it->get<int64_t>();
  return true;
}

bool read_bool(const nlohmann::json& j, const char* key, const std::string& source, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    fail(ErrorKind::Format, source + ": \"" + key + "\" must be true or false, got " + it->dump());
  return it->get<bool>();
}

// The shortest decimal that reads back as this float ("1e-05", not 9.99999974e-06).
std::string shortest_decimal(float v) {
  char buf[32];
  for (int digits = 1; digits < 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

}  // namespace

Config Config::preset(const std::string& name) {
  if (name == "gpt2") return make(12, 12, 768, 1024, 50257, 50256);
  if (name == "gpt2-medium") return make(24, 16, 1024, 1024, 50257, 50256);
  if (name == "gpt2-large") return make(36, 20, 1280, 1024, 50257, 50256);
  if (name == "gpt2-xl") return make(48, 25, 1600, 1024, 50257, 50256);
  if (name == "tiny") return make(2, 2, 64, 64, 256, 255);
  if (name == "mini") return make(4, 4, 256, 256, 50257, 50256);
  std::string names;
  for (const std::string& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  fail(ErrorKind::Format, "unknown preset \"" + name + "\" (known: " + names + ")");
}

std::vector<std::string> Config::preset_names() {
  return {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny", "mini"};
}

void Config::check_token_ids(const uint32_t* ids, size_t n, const char* fn, int64_t row_len) const {
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int64_t>(ids[i]) < vocab_size) continue;
    const auto at = static_cast<int64_t>(i);
    const std::string where =
        row_len > 0 ? "[" + std::to_string(at / row_len) + ", " + std::to_string(at % row_len) + "]"
                    : "index " + std::to_string(at);
    throw Error(ErrorKind::Range,
                std::string(fn) + ": token id " + std::to_string(ids[i]) + " at " + where +
                    " is outside the vocabulary (vocab_size = " + std::to_string(vocab_size) + ")");
  }
}

void Config::validate() const {
  auto check = [](const char* name, int64_t v, int64_t hi) {
    if (v < 1 || v > hi)
      fail(ErrorKind::Format, std::string(name) + " = " + std::to_string(v) + " outside [1, " +
                                  std::to_string(hi) + "]");
  };
  check("n_layer", n_layer, kMaxLayers);
  check("n_head", n_head, kMaxHeads);
  check("n_embd", n_embd, kMaxEmbd);
  check("n_ctx", n_ctx, kMaxCtx);
  check("vocab_size", vocab_size, kMaxVocab);
  if (n_embd % n_head != 0)
    fail(ErrorKind::Format, "n_embd = " + std::to_string(n_embd) +
                                " is not divisible by n_head = " + std::to_string(n_head));
  if (!(eps > 0.0f && eps < 1.0f))
    fail(ErrorKind::Format, "layer_norm_epsilon = " + std::to_string(eps) + " outside (0, 1)");
  for (auto [name, id] : {std::pair{"bos_id", bos_id}, std::pair{"eos_id", eos_id}})
    if (id < -1 || id >= vocab_size)
      fail(ErrorKind::Format, std::string(name) + " = " + std::to_string(id) +
                                  " outside the vocabulary [0, " + std::to_string(vocab_size) +
                                  ") (-1 means none)");
  if (num_params() > kMaxParams)
    fail(ErrorKind::Format, std::to_string(num_params()) + " parameters exceed the cap of " +
                                std::to_string(kMaxParams));
}

int64_t Config::num_params() const {
  // The per-field caps keep every product here far below 2^63.
  const int64_t C = n_embd;
  return vocab_size * C * (tie_word_embeddings ? 1 : 2) + n_ctx * C +
         n_layer * (12 * C * C + 13 * C) + 2 * C;
}

Config Config::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::Format, source + ": invalid JSON: " + e.what());
  }
  if (!j.is_object()) fail(ErrorKind::Format, source + ": not a JSON object");

  if (auto it = j.find("model_type"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "gpt2")
      fail(ErrorKind::Unsupported, source + ": model_type " + it->dump() + " is not \"gpt2\"");
  }
  if (auto it = j.find("activation_function"); it != j.end() && !it->is_null()) {
    // Both names are the tanh approximation forge's gelu computes.
    const std::string act = it->is_string() ? it->get<std::string>() : it->dump();
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      fail(ErrorKind::Unsupported,
           source + ": activation_function \"" + act + "\" (forge implements gelu_new)");
  }
  if (!read_bool(j, "scale_attn_weights", source, true))
    fail(ErrorKind::Unsupported, source + ": scale_attn_weights = false");
  if (read_bool(j, "scale_attn_by_inverse_layer_idx", source, false))
    fail(ErrorKind::Unsupported, source + ": scale_attn_by_inverse_layer_idx = true");
  if (read_bool(j, "add_cross_attention", source, false))
    fail(ErrorKind::Unsupported, source + ": add_cross_attention = true");

  Config c;
  auto required = [&](const char* key, int64_t& out) {
    if (!read_int(j, key, source, out))
      fail(ErrorKind::Format, source + ": missing \"" + key + "\"");
  };
  required("n_layer", c.n_layer);
  required("n_head", c.n_head);
  required("n_embd", c.n_embd);
  required("vocab_size", c.vocab_size);
  if (!read_int(j, "n_positions", source, c.n_ctx) && !read_int(j, "n_ctx", source, c.n_ctx))
    fail(ErrorKind::Format, source + ": missing \"n_positions\" (or \"n_ctx\")");
  c.tie_word_embeddings = read_bool(j, "tie_word_embeddings", source, true);
  int64_t n_inner = 0;
  if (read_int(j, "n_inner", source, n_inner) && n_inner != 4 * c.n_embd)
    fail(ErrorKind::Unsupported,
         source + ": n_inner = " + std::to_string(n_inner) + " (forge implements 4 * n_embd)");
  if (auto it = j.find("layer_norm_epsilon"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) fail(ErrorKind::Format, source + ": layer_norm_epsilon must be a number");
    c.eps = static_cast<float>(it->get<double>());
  }
  // HF's defaults (50256) also land in small-vocabulary configs, where no such token can
  // ever appear: treat an id outside the vocabulary as "no such token".
  // An explicit null is HF's None (no such token; what to_json writes for -1); an absent
  // key is GPT2Config's default, 50256.
  for (auto [key, id] :
       {std::pair{"bos_token_id", &c.bos_id}, std::pair{"eos_token_id", &c.eos_id}}) {
    const auto it = j.find(key);
    *id = it == j.end() ? 50256 : -1;
    read_int(j, key, source, *id);
  }
  if (c.vocab_size >= 1) {
    if (c.bos_id < 0 || c.bos_id >= c.vocab_size) c.bos_id = -1;
    if (c.eos_id < 0 || c.eos_id >= c.vocab_size) c.eos_id = -1;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(e.what()) + " (in " + source + ")");
  }
  return c;
}

Config Config::from_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::Io, "cannot read " + path);
  // A config.json is a few hundred bytes; refuse to slurp anything huge.
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  if (size < 0) fail(ErrorKind::Io, "cannot read " + path);
  if (size > (int64_t{1} << 20))
    fail(ErrorKind::Format,
         path + " is " + std::to_string(size) + " bytes, too large for a config");
  f.seekg(0);
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f && !f.eof()) fail(ErrorKind::Io, "error reading " + path);
  return from_json(ss.str(), path);
}

std::string Config::to_json() const {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_embd"] = n_embd;
  j["n_positions"] = n_ctx;
  j["n_ctx"] = n_ctx;
  j["vocab_size"] = vocab_size;
  j["layer_norm_epsilon"] = std::stod(shortest_decimal(eps));
  j["activation_function"] = "gelu_new";
  j["n_inner"] = nullptr;
  j["initializer_range"] = 0.02;
  j["resid_pdrop"] = 0.1;
  j["embd_pdrop"] = 0.1;
  j["attn_pdrop"] = 0.1;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = bos_id >= 0 ? nlohmann::ordered_json(bos_id) : nlohmann::ordered_json();
  j["eos_token_id"] = eos_id >= 0 ? nlohmann::ordered_json(eos_id) : nlohmann::ordered_json();
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

}  // namespace forge::gpt2
