// GPT-2 weights: loading a model folder (HF names, Conv1D layout, tied or untied head,
// one file or shards, F32/F16/BF16), random GPT-2 init, building from given weights, and
// saving a model folder that HF transformers can load.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"
#include "forge/threads.h"
#include "io/atomic_file.h"
#include "models/gpt2/weight_layout.h"

namespace forge::gpt2 {
namespace {

[[noreturn]] void fail(const char* fn, ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(fn) + ": " + what);
}

/// Every weight of a config with its HF name (no prefix) and expected shape, in HF's order.
/// `slot` points into `w` so that loading and init fill the same table.
struct Entry {
  std::string name;
  Shape shape;
  Tensor* slot;
  bool residual;     // a residual projection (init scaled by 1/sqrt(2 L))
  bool layernorm_w;  // init to ones
  bool bias;         // init to zeros
  bool linear = false;  // a linear weight: [out, in] in dtypes other than F32 (weight_layout.h)
};

std::vector<Entry> entries(const Config& c, Weights& w) {
  const int64_t C = c.n_embd;
  w.layers.resize(static_cast<size_t>(c.n_layer));
  std::vector<Entry> e;
  e.push_back({"wte.weight", Shape{c.vocab_size, C}, &w.wte, false, false, false});
  e.push_back({"wpe.weight", Shape{c.n_ctx, C}, &w.wpe, false, false, false});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string p = "h." + std::to_string(l) + ".";
    e.push_back({p + "ln_1.weight", Shape{C}, &L.ln_1_w, false, true, false});
    e.push_back({p + "ln_1.bias", Shape{C}, &L.ln_1_b, false, false, true});
    e.push_back({p + "attn.c_attn.weight", Shape{C, 3 * C}, &L.attn_w, false, false, false, true});
    e.push_back({p + "attn.c_attn.bias", Shape{3 * C}, &L.attn_b, false, false, true});
    e.push_back({p + "attn.c_proj.weight", Shape{C, C}, &L.attn_proj_w, true, false, false, true});
    e.push_back({p + "attn.c_proj.bias", Shape{C}, &L.attn_proj_b, false, false, true});
    e.push_back({p + "ln_2.weight", Shape{C}, &L.ln_2_w, false, true, false});
    e.push_back({p + "ln_2.bias", Shape{C}, &L.ln_2_b, false, false, true});
    e.push_back({p + "mlp.c_fc.weight", Shape{C, 4 * C}, &L.fc_w, false, false, false, true});
    e.push_back({p + "mlp.c_fc.bias", Shape{4 * C}, &L.fc_b, false, false, true});
    e.push_back({p + "mlp.c_proj.weight", Shape{4 * C, C}, &L.fc_proj_w, true, false, false, true});
    e.push_back({p + "mlp.c_proj.bias", Shape{C}, &L.fc_proj_b, false, false, true});
  }
  e.push_back({"ln_f.weight", Shape{C}, &w.ln_f_w, false, true, false});
  e.push_back({"ln_f.bias", Shape{C}, &w.ln_f_b, false, false, true});
  return e;
}

// --- deterministic N(0, 1) samples: a counter-based generator, so that every tensor (and
// every element) gets the same value on every machine and in any order ---------------------

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// Fills x[begin, end) (begin even) of a tensor with std * N(0, 1): element pair (2i, 2i+1)
/// from one Box-Muller draw of the 64-bit hash of (stream, i).
void fill_normal_range(float* x, int64_t begin, int64_t end, int64_t n, uint64_t stream,
                       float stddev) {
  // Float math: twice as fast as double here, and 24-bit uniforms reach 5.8 sigma, plenty
  // for an init.
  constexpr float kTwoPi = 6.28318531f;
  for (int64_t i = begin; i < end; i += 2) {
    const uint64_t h = splitmix64(stream ^ splitmix64(static_cast<uint64_t>(i / 2)));
    // Two 24-bit uniforms; u1 in (0, 1] so that log(u1) is finite.
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(h & 0xFFFFFFULL) * (1.0f / 16777216.0f);
    const float r = std::sqrt(-2.0f * std::log(u1)) * stddev;
    x[i] = r * std::cos(kTwoPi * u2);
    if (i + 1 < n) x[i + 1] = r * std::sin(kTwoPi * u2);
  }
}

/// fill_normal_range over the whole tensor, split across threads for big tensors (GPT-2
/// 124M draws 124M samples; the values do not depend on the split).
void fill_normal(float* x, int64_t n, uint64_t stream, float stddev) {
  constexpr int64_t kPerThread = int64_t{1} << 20;
  const int64_t parts = std::clamp<int64_t>(n / kPerThread, 1, num_threads());
  auto bound = [&](int64_t p) { return p == parts ? n : n * p / parts / 2 * 2; };  // even
  parallel_tasks(parts, [&](int64_t p) {
    fill_normal_range(x, bound(p), bound(p + 1), n, stream, stddev);
  });
}

Tensor load_tensor(const TensorDirectory& dir, const std::string& name, Device device) {
  return dir.load(name, device);
}

}  // namespace

// ------------------------------------------------------------------------------------------

Model Model::load(const std::string& dir, Device device) {
  ModelOptions o;
  o.device = device;
  return load(dir, o);
}

Model Model::load(const std::string& dir, const ModelOptions& options) {
  const char* fn = "gpt2::Model::load";
  namespace fs = std::filesystem;
  std::error_code ec;
  if (is_gguf_path(dir)) return load_gguf_model(dir, options.device);
  if (!fs::is_directory(dir, ec)) fail(fn, ErrorKind::Io, "no model folder at " + dir);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path, ec))
    fail(fn, ErrorKind::Io,
         "missing " + config_path +
             " (a model folder holds config.json "
             "and model.safetensors)");
  try {
    Config config = Config::from_json_file(config_path);
    const TensorDirectory files = TensorDirectory::open(dir);

    // HF writes names with a "transformer." prefix (GPT2LMHeadModel) or without (GPT2Model);
    // accept either, name by name.
    auto resolve = [&](const std::string& name) -> std::optional<std::string> {
      for (const std::string& n : {"transformer." + name, name})
        if (files.contains(n)) return n;
      return std::nullopt;
    };
    auto fetch = [&](const std::string& name, const Shape& shape, Device device, bool linear) {
      const std::optional<std::string> found = resolve(name);
      if (!found)
        fail(fn, ErrorKind::Format,
             dir + ": missing tensor \"" + name +
                 "\" (n_layer = " + std::to_string(config.n_layer) + " in config.json)");
      const TensorInfo& info = files.info(*found);
      if (info.shape != shape)
        fail(fn, ErrorKind::Format,
             dir + ": tensor \"" + *found + "\" has shape " + info.shape.str() +
                 ", config.json implies " + shape.str());
      if (info.dtype != "F32" && info.dtype != "F16" && info.dtype != "BF16")
        fail(fn, ErrorKind::Unsupported,
             dir + ": tensor \"" + *found + "\" has dtype " + info.dtype +
                 " (forge loads F32, F16, BF16)");
      // 2-D weights keep a 16-bit dtype (linear ones turned to [out, in]); the rest is F32.
      if (info.dtype == "F32" || shape.rank() != 2 || name == "wpe.weight")
        return load_tensor(files, *found, device);
      const auto raw = files.file_of(*found).raw(*found);
      const Tensor t = Tensor::from_bytes(raw.data(), raw.size(), shape,
                                          info.dtype == "F16" ? DType::F16 : DType::BF16, device);
      return linear ? transposed(t) : t;
    };

    Weights w;
    std::vector<Entry> table = entries(config, w);
    for (const Entry& e : table) *e.slot = fetch(e.name, e.shape, options.device, e.linear);
    const Shape vc{config.vocab_size, config.n_embd};

    // An explicit LM head counts only when it differs from wte (HF often stores the tied
    // copy; older exports carry it too).
    if (files.contains("lm_head.weight")) {
      const TensorInfo& info = files.info("lm_head.weight");
      if (info.shape != vc)
        fail(fn, ErrorKind::Format,
             dir + ": tensor \"lm_head.weight\" has shape " + info.shape.str() + ", expected " +
                 vc.str());
      const std::string wte_name = *resolve("wte.weight");
      const auto a = files.file_of("lm_head.weight").raw("lm_head.weight");
      const auto b = files.file_of(wte_name).raw(wte_name);
      const bool same_bytes = info.dtype == files.info(wte_name).dtype && a.size() == b.size() &&
                              std::memcmp(a.data(), b.data(), a.size()) == 0;
      if (!same_bytes) w.lm_head = fetch("lm_head.weight", vc, options.device, false);
    } else if (!config.tie_word_embeddings) {
      fail(fn, ErrorKind::Format,
           dir +
               ": config.json says tie_word_embeddings = false but "
               "there is no tensor \"lm_head.weight\"");
    }
    config.tie_word_embeddings = !w.lm_head.defined();
    return from_weights(config, runnable_on(std::move(w), options.device));
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(fn, 0) == 0) throw;
    throw Error(e.kind(), std::string(fn) + ": " + msg);
  }
}

Model Model::random(const Config& config, uint64_t seed, Device device) {
  ModelOptions o;
  o.device = device;
  return random(config, seed, o);
}

Model Model::random(const Config& config, uint64_t seed, const ModelOptions& options) {
  const char* fn = "gpt2::Model::random";
  try {
    config.validate();
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(fn) + ": " + e.what());
  }
  const float resid_std =
      static_cast<float>(0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer)));
  Weights w;
  std::vector<Entry> table = entries(config, w);
  // Tensor k of the table draws from its own stream, so that sizes of one tensor never
  // shift the values of another.
  uint64_t k = 0;
  for (const Entry& e : table) {
    const uint64_t stream = splitmix64(seed ^ splitmix64(0xF0F0ULL + k++));
    Tensor host = Tensor::empty(e.shape, DType::F32, Device::cpu());
    float* x = host.data<float>();
    const int64_t n = host.numel();
    if (e.layernorm_w) {
      std::fill(x, x + n, 1.0f);
    } else if (e.bias) {
      std::fill(x, x + n, 0.0f);
    } else {
      fill_normal(x, n, stream, e.residual ? resid_std : 0.02f);
    }
    *e.slot = options.device.is_cpu() ? host : host.to(options.device);
  }
  if (!config.tie_word_embeddings) {
    Tensor host = Tensor::empty({config.vocab_size, config.n_embd}, DType::F32, Device::cpu());
    fill_normal(host.data<float>(), host.numel(), splitmix64(seed ^ splitmix64(0xF0F0ULL + k)),
                0.02f);
    w.lm_head = options.device.is_cpu() ? host : host.to(options.device);
  }
  return from_weights(config, std::move(w));
}

Model Model::from_weights(const Config& config, Weights weights) {
  const char* fn = "gpt2::Model::from_weights";
  try {
    config.validate();
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(fn) + ": " + e.what());
  }
  Device device = weights.wpe.defined() ? weights.wpe.device() : Device::cpu();
  // 2-D weights but wpe may be of any weight dtype; linear ones are then [out, in].
  auto check = [&](const std::string& name, const Tensor& t, Shape shape, bool linear) {
    if (!t.defined()) fail(fn, ErrorKind::Format, "weight " + name + " is missing");
    const bool any_dtype = shape.rank() == 2 && name != "wpe.weight";
    if (t.dtype() == DType::U32 || (!any_dtype && t.dtype() != DType::F32))
      fail(fn, ErrorKind::DType,
           "weight " + name + " must be f32" + (any_dtype ? " or a weight dtype" : "") + ", got " +
               dtype_name(t.dtype()));
    if (linear && t.dtype() != DType::F32) shape = Shape{shape.dim(1), shape.dim(0)};
    if (t.shape() != shape)
      fail(fn, ErrorKind::Format,
           "weight " + name + " has shape " + t.shape().str() + ", expected " + shape.str());
    if (t.device() != device)
      fail(fn, ErrorKind::Device,
           "weight " + name + " is on " + t.device().str() + ", the others on " + device.str());
  };
  if (weights.layers.size() != static_cast<size_t>(config.n_layer))
    fail(fn, ErrorKind::Format,
         std::to_string(weights.layers.size()) +
             " layers for n_layer = " + std::to_string(config.n_layer));
  // Check every table entry against the config, reusing the name/shape table.
  Weights probe = weights;
  for (const Entry& e : entries(config, probe)) check(e.name, *e.slot, e.shape, e.linear);
  if (config.tie_word_embeddings == weights.lm_head.defined())
    fail(fn, ErrorKind::Format,
         config.tie_word_embeddings
             ? "lm_head weights given but config.tie_word_embeddings is true"
             : "config.tie_word_embeddings is false but no lm_head weights are given");
  if (weights.lm_head.defined())
    check("lm_head.weight", weights.lm_head, Shape{config.vocab_size, config.n_embd}, false);
  Model m;
  m.config_ = config;
  m.weights_ = std::move(weights);
  m.device_ = device;
  return m;
}

std::vector<std::pair<std::string, Tensor>> Model::named_weights() const {
  std::vector<std::pair<std::string, Tensor>> out;
  Weights w = weights_;  // handles: the table's slots point at the model's tensors
  for (const Entry& e : entries(config_, w)) out.emplace_back(e.name, *e.slot);
  if (w.lm_head.defined()) out.emplace_back("lm_head.weight", w.lm_head);
  return out;
}

void Model::save(const std::string& dir) const {
  const char* fn = "gpt2::Model::save";
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail(fn, ErrorKind::Io, "cannot create folder " + dir + (ec ? ": " + ec.message() : ""));
  const NamedTensors named = widened().named_weights();
  try {
    save_safetensors((fs::path(dir) / "model.safetensors").string(), named, {{"format", "pt"}});
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(fn) + ": " + e.what());
  }
  // Atomic like the weights: a reader (or a kill) never sees a half-written config.
  const std::string config_path = (fs::path(dir) / "config.json").string();
  io::AtomicFile f(config_path, fn);  // Error(Io) "gpt2::Model::save: <path>: ..."
  const std::string text = config_.to_json();
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace forge::gpt2
