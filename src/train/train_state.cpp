// The training state file: one safetensors file holding, for every parameter p (HF name),
//   "<p>"                       the weights
//   "optim.exp_avg.<p>"         AdamW's first moment m
//   "optim.exp_avg_sq.<p>"      AdamW's second moment v
// and in __metadata__: forge.format ("forge-train-state"), forge.version ("1"), forge.step
// (optimizer steps taken), forge.updates (AdamW updates made: the bias-correction count;
// smaller than the steps when steps were skipped), forge.hyper (Hyper as JSON),
// forge.config (the model's config.json text), and the caller's own keys. Older files with
// a table in row chunks ("<p>.chunk0", ...) still load.
#include <cmath>
#include <string>

#include "forge/error.h"
#include "forge/safetensors.h"
#include "train/train_impl.h"

namespace forge::train {
namespace {

constexpr const char* kFormat = "forge-train-state";
constexpr const char* kVersion = "1";
const std::string kReserved = "forge.";

std::string m_name(const std::string& p) { return "optim.exp_avg." + p; }
std::string v_name(const std::string& p) { return "optim.exp_avg_sq." + p; }

/// A non-negative decimal integer (no sign, no spaces), or -1.
int64_t parse_count(const std::string& s) {
  if (s.empty() || s.size() > 18) return -1;
  int64_t x = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return -1;
    x = x * 10 + (ch - '0');
  }
  return x;
}

}  // namespace

void Trainer::save_state(const std::string& path,
                         const std::map<std::string, std::string>& metadata) const {
  const char* fn = "train::Trainer::save_state";
  const Impl& s = *impl_;
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : metadata) {
    if (k.compare(0, kReserved.size(), kReserved) == 0)
      throw Error(ErrorKind::Format, std::string(fn) + ": metadata key \"" + k +
                                         "\" uses the reserved prefix \"" + kReserved + "\"");
    meta[k] = v;
  }
  meta["forge.format"] = kFormat;
  meta["forge.version"] = kVersion;
  meta["forge.step"] = std::to_string(s.steps_done);
  meta["forge.updates"] = std::to_string(s.updates);
  meta["forge.hyper"] = hyper_to_json(s.hyper);
  meta["forge.config"] = s.model->config().to_json();
  NamedTensors tensors;
  for (const ag::Parameter& p : s.params) tensors.emplace_back(p.name(), p.value());
  for (size_t i = 0; i < s.params.size(); ++i)
    tensors.emplace_back(m_name(s.params[i].name()), s.m[i]);
  for (size_t i = 0; i < s.params.size(); ++i)
    tensors.emplace_back(v_name(s.params[i].name()), s.v[i]);
  try {
    save_safetensors(path, tensors, meta);  // atomic: temp file + fsync + rename
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(fn) + ": " + e.what());
  }
}

std::map<std::string, std::string> Trainer::load_state(const std::string& path) {
  const std::string fn = "train::Trainer::load_state: " + path;
  Impl& s = *impl_;
  auto format_error = [&](const std::string& what) {
    return Error(ErrorKind::Format, fn + ": " + what);
  };
  SafeTensorsFile file = [&] {
    try {
      return SafeTensorsFile::open(path);
    } catch (const Error& e) {
      throw Error(e.kind(), "train::Trainer::load_state: " + std::string(e.what()));
    }
  }();
  const std::map<std::string, std::string>& meta = file.metadata();
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end())
      throw format_error(std::string("no \"") + key +
                         "\" in the metadata (not a forge training state)");
    return it->second;
  };
  if (get("forge.format") != kFormat)
    throw format_error("forge.format is \"" + get("forge.format") + "\", not \"" + kFormat + "\"");
  if (get("forge.version") != kVersion)
    throw format_error("unsupported training-state version \"" + get("forge.version") + "\"");
  const int64_t steps = parse_count(get("forge.step"));
  const int64_t updates = parse_count(get("forge.updates"));
  if (steps < 0 || updates < 0 || updates > steps)
    throw format_error("bad step counts forge.step = \"" + get("forge.step") +
                       "\", forge.updates = \"" + get("forge.updates") + "\"");
  hyper_from_json(get("forge.hyper"), path);  // a corrupt value is an error even if unused

  // The model the state was made for must be this one: n_head changes no shape, so the
  // config is compared too, then every tensor's shape.
  const gpt2::Config& have = s.model->config();
  gpt2::Config saved;
  try {
    saved = gpt2::Config::from_json(get("forge.config"), path + " (forge.config)");
  } catch (const Error& e) {
    throw format_error(std::string("bad forge.config: ") + e.what());
  }
  if (saved.n_layer != have.n_layer || saved.n_head != have.n_head || saved.n_embd != have.n_embd ||
      saved.n_ctx != have.n_ctx || saved.vocab_size != have.vocab_size ||
      saved.tie_word_embeddings != have.tie_word_embeddings)
    throw format_error(
        "the state's model config (n_layer " + std::to_string(saved.n_layer) + ", n_head " +
        std::to_string(saved.n_head) + ", n_embd " + std::to_string(saved.n_embd) + ", n_ctx " +
        std::to_string(saved.n_ctx) + ", vocab " + std::to_string(saved.vocab_size) +
        ") does not match the model's (n_layer " + std::to_string(have.n_layer) + ", n_head " +
        std::to_string(have.n_head) + ", n_embd " + std::to_string(have.n_embd) + ", n_ctx " +
        std::to_string(have.n_ctx) + ", vocab " + std::to_string(have.vocab_size) + ")");
  const size_t P = s.params.size();
  auto count_error = [&](size_t want) {
    return format_error("holds " + std::to_string(file.names().size()) +
                        " tensors, which does not match the model's " + std::to_string(want) +
                        " (weights, exp_avg and exp_avg_sq of " + std::to_string(P) +
                        " parameters)");
  };
  // At least 3 per parameter (more where an older file holds a table in row chunks).
  if (file.names().size() < 3 * P) throw count_error(3 * P);
  // Validate everything before changing anything: a bad file leaves the trainer as it was.
  std::vector<Tensor> w(P), m(P), v(P);
  size_t consumed = 0;  // the file's tensors read
  for (size_t i = 0; i < P; ++i) {
    const Tensor& want = s.params[i].value();
    const std::string& name = s.params[i].name();
    // Values are checked on the host: a resumed run must not start from NaN weights or a
    // second moment AdamW would take the square root of below zero.
    enum class Values { finite, finite_non_negative };
    // `key` from the file as F32 of want's shape, on the host. Files of earlier builds
    // (through commit 5c6c0a8) may hold a [V, C] table as row chunks "<key>.chunk0",
    // "<key>.chunk1", ... (their wte under a GPU's binding limit): those are joined.
    auto read = [&](const std::string& key) {
      auto check = [&](const std::string& k, const Shape& shape) {
        const TensorInfo& info = file.info(k);
        if (info.dtype != "F32" || info.shape != shape)
          throw format_error("tensor \"" + k + "\" " + info.dtype + " " + info.shape.str() +
                             " does not match the model's F32 " + shape.str());
      };
      if (file.contains(key)) {
        check(key, want.shape());
        ++consumed;
        return file.load(key, Device::cpu());
      }
      auto chunk = [&](int64_t c) { return key + ".chunk" + std::to_string(c); };
      if (!file.contains(chunk(0)) || want.rank() != 2)
        throw format_error("no tensor \"" + key + "\" (it does not match the model)");
      Tensor joined = Tensor::empty(want.shape(), DType::F32, Device::cpu());
      int64_t row = 0;
      for (int64_t c = 0; file.contains(chunk(c)); ++c) {
        const TensorInfo& info = file.info(chunk(c));
        const int64_t rows = info.shape.rank() == 2 ? info.shape.dim(0) : -1;
        if (rows < 1 || rows > want.dim(0) - row)
          throw format_error("tensor \"" + chunk(c) + "\" " + info.shape.str() +
                             " does not fit the rows left of the model's " + want.shape().str());
        check(chunk(c), Shape{rows, want.dim(1)});
        Tensor dst = joined.narrow_rows(row, rows);
        dst.copy_from(file.load(chunk(c), Device::cpu()));
        row += rows;
        ++consumed;
      }
      if (row != want.dim(0))
        throw format_error("the chunks of \"" + key + "\" hold " + std::to_string(row) +
                           " rows, the model's " + want.shape().str() + " " +
                           std::to_string(want.dim(0)));
      return joined;
    };
    auto load = [&](const std::string& key, Values values) {
      const Tensor host = read(key);
      const float* x = host.data<float>();
      for (int64_t j = 0; j < host.numel(); ++j)
        if (!std::isfinite(x[j]) || (values == Values::finite_non_negative && x[j] < 0.0f))
          throw format_error("tensor \"" + key + "\" holds " + std::to_string(x[j]) +
                             " at element " + std::to_string(j) +
                             (values == Values::finite_non_negative
                                  ? " (AdamW's second moment is finite and >= 0)"
                                  : " (the state's values are finite)"));
      return want.device().is_cpu() ? host : host.to(want.device());
    };
    w[i] = load(name, Values::finite);
    m[i] = load(m_name(name), Values::finite);
    v[i] = load(v_name(name), Values::finite_non_negative);
  }
  if (file.names().size() != consumed) throw count_error(consumed);
  for (size_t i = 0; i < P; ++i) {
    s.params[i].value().copy_from(w[i]);
    s.m[i].copy_from(m[i]);
    s.v[i].copy_from(v[i]);
  }
  ag::zero_grad(s.params);
  s.steps_done = steps;
  s.updates = updates;
  return meta;
}

}  // namespace forge::train
