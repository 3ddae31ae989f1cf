// GPT-2 in GGUF files, as llama.cpp's `gpt2` architecture names and lays it out: reading a
// model (config from the metadata, weights in their dtypes) and writing one.
//
// Tensor names (llama.cpp's), forge's names, and the stored shapes (ne reversed):
//   token_embd.weight    wte [V, C]          position_embd.weight  wpe [P, C]
//   blk.N.attn_norm.*    ln_1                blk.N.attn_qkv.*      c_attn  [3C, C] + [3C]
//   blk.N.attn_output.*  attn.c_proj [C, C]  blk.N.ffn_norm.*      ln_2
//   blk.N.ffn_up.*       mlp.c_fc [4C, C]    blk.N.ffn_down.*      mlp.c_proj [C, 4C]
//   output_norm.*        ln_f                output.weight         an untied head [V, C]
// Linear weights are stored [out, in]: forge keeps them so in the dtypes other than F32 and
// turns F32 ones into HF's [in, out] (weight_layout.h).
#include <filesystem>
#include <map>
#include <string>

#include "forge/error.h"
#include "forge/gguf.h"
#include "forge/gpt2.h"
#include "forge/quantize.h"
#include "forge/tokenizer.h"
#include "models/gpt2/weight_layout.h"

namespace forge::gpt2 {
namespace {

[[noreturn]] void fail(const char* fn, ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(fn) + ": " + what);
}

// llama.cpp's file types of "all weights in one dtype".
uint32_t file_type_of(DType d) {
  switch (d) {
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q8_0: return 7;
    case DType::BF16: return 32;
    default: return 0;
  }
}

struct Slot {
  std::string gguf;  // llama.cpp's name
  Tensor* t;
  Shape shape;     // forge's F32 shape
  bool linear;     // a linear weight ([out, in] in the file)
  bool any_dtype;  // a 2-D weight that may keep its dtype (not wpe)
};

std::vector<Slot> slots(const Config& c, Weights& w, bool untied) {
  const int64_t C = c.n_embd;
  w.layers.resize(static_cast<size_t>(c.n_layer));
  std::vector<Slot> s;
  s.push_back({"token_embd.weight", &w.wte, Shape{c.vocab_size, C}, false, true});
  s.push_back({"position_embd.weight", &w.wpe, Shape{c.n_ctx, C}, false, false});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    s.push_back({p + "attn_norm.weight", &L.ln_1_w, Shape{C}, false, false});
    s.push_back({p + "attn_norm.bias", &L.ln_1_b, Shape{C}, false, false});
    s.push_back({p + "attn_qkv.weight", &L.attn_w, Shape{C, 3 * C}, true, true});
    s.push_back({p + "attn_qkv.bias", &L.attn_b, Shape{3 * C}, false, false});
    s.push_back({p + "attn_output.weight", &L.attn_proj_w, Shape{C, C}, true, true});
    s.push_back({p + "attn_output.bias", &L.attn_proj_b, Shape{C}, false, false});
    s.push_back({p + "ffn_norm.weight", &L.ln_2_w, Shape{C}, false, false});
    s.push_back({p + "ffn_norm.bias", &L.ln_2_b, Shape{C}, false, false});
    s.push_back({p + "ffn_up.weight", &L.fc_w, Shape{C, 4 * C}, true, true});
    s.push_back({p + "ffn_up.bias", &L.fc_b, Shape{4 * C}, false, false});
    s.push_back({p + "ffn_down.weight", &L.fc_proj_w, Shape{4 * C, C}, true, true});
    s.push_back({p + "ffn_down.bias", &L.fc_proj_b, Shape{C}, false, false});
  }
  s.push_back({"output_norm.weight", &w.ln_f_w, Shape{C}, false, false});
  s.push_back({"output_norm.bias", &w.ln_f_b, Shape{C}, false, false});
  if (untied) s.push_back({"output.weight", &w.lm_head, Shape{c.vocab_size, C}, false, true});
  return s;
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

Model load_gguf_model(const std::string& path, Device device) {
  const char* fn = "gpt2::Model::load";
  const gguf::File f = gguf::File::open(path);
  const std::string where = path + ": ";
  try {
    const std::string arch = f.get_string("general.architecture");
    if (arch != "gpt2")
      fail(fn, ErrorKind::Unsupported, where + "architecture \"" + arch + "\" (forge reads gpt2)");
    Config c;
    c.n_layer = f.get_i64("gpt2.block_count");
    c.n_head = f.get_i64("gpt2.attention.head_count");
    c.n_embd = f.get_i64("gpt2.embedding_length");
    c.n_ctx = f.get_i64("gpt2.context_length");
    c.eps = static_cast<float>(f.get_f64("gpt2.attention.layer_norm_epsilon"));
    if (const gguf::Value* ff = f.find("gpt2.feed_forward_length");
        ff && ff->as_i64() != 4 * c.n_embd)
      fail(fn, ErrorKind::Unsupported,
           where + "gpt2.feed_forward_length " + std::to_string(ff->as_i64()) +
               " (forge's GPT-2 has 4 n_embd = " + std::to_string(4 * c.n_embd) + ")");
    const gguf::TensorEntry* embd = f.tensor("token_embd.weight");
    if (!embd) fail(fn, ErrorKind::Format, where + "no tensor \"token_embd.weight\"");
    if (embd->ne.size() != 2)
      fail(fn, ErrorKind::Format,
           where + "token_embd.weight must be 2-D, got " + embd->shape().str());
    c.vocab_size = static_cast<int64_t>(embd->ne[1]);
    c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
    auto id = [&](const char* key) -> int64_t {
      const gguf::Value* v = f.find(key);
      if (!v) return -1;
      const int64_t i = v->as_i64();
      return i >= 0 && i < c.vocab_size ? i : -1;
    };
    c.bos_id = id("tokenizer.ggml.bos_token_id");
    c.eos_id = id("tokenizer.ggml.eos_token_id");
    c.validate();

    Weights w;
    std::vector<Slot> table = slots(c, w, !c.tie_word_embeddings);
    std::map<std::string, bool> expected;
    for (const Slot& s : table) expected[s.gguf] = true;
    for (const gguf::TensorEntry& e : f.tensors())
      if (!expected.count(e.name))
        fail(fn, ErrorKind::Format,
             where + "unexpected tensor \"" + e.name +
                 "\" for gpt2 with n_layer = " + std::to_string(c.n_layer));
    for (const Slot& s : table) {
      const gguf::TensorEntry* e = f.tensor(s.gguf);
      if (!e) fail(fn, ErrorKind::Format, where + "missing tensor \"" + s.gguf + "\"");
      // The file's shape: linear weights [out, in].
      const Shape want = s.linear ? Shape{s.shape.dim(1), s.shape.dim(0)} : s.shape;
      if (e->shape() != want)
        fail(fn, ErrorKind::Format,
             where + "tensor \"" + s.gguf + "\" has shape " + e->shape().str() +
                 ", the metadata implies " + want.str());
      Tensor t = f.load(s.gguf, device);  // Error(Unsupported) for types forge lacks
      if (!s.any_dtype && t.dtype() != DType::F32) t = widen_weights(t);
      if (s.linear && t.dtype() == DType::F32) t = transposed(t);
      *s.t = t;
    }
    return Model::from_weights(c, runnable_on(std::move(w), device));
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(fn, 0) == 0) throw;
    throw Error(e.kind(), std::string(fn) + ": " + msg);
  }
}

void Model::save_gguf(const std::string& path, const Tokenizer& tokenizer,
                      const std::string& name) const {
  const char* fn = "gpt2::Model::save_gguf";
  const Config& c = config_;
  gguf::Metadata meta;
  meta.emplace_back("general.architecture", gguf::Value::string("gpt2"));
  meta.emplace_back("general.name", gguf::Value::string(name));
  meta.emplace_back("general.file_type", gguf::Value::u32(file_type_of(weight_dtype())));
  meta.emplace_back("gpt2.context_length", gguf::Value::u32(static_cast<uint32_t>(c.n_ctx)));
  meta.emplace_back("gpt2.embedding_length", gguf::Value::u32(static_cast<uint32_t>(c.n_embd)));
  meta.emplace_back("gpt2.feed_forward_length",
                    gguf::Value::u32(static_cast<uint32_t>(4 * c.n_embd)));
  meta.emplace_back("gpt2.block_count", gguf::Value::u32(static_cast<uint32_t>(c.n_layer)));
  meta.emplace_back("gpt2.attention.head_count", gguf::Value::u32(static_cast<uint32_t>(c.n_head)));
  meta.emplace_back("gpt2.attention.layer_norm_epsilon", gguf::Value::f32(c.eps));
  if (tokenizer.defined()) {
    if (tokenizer.vocab_size() != c.vocab_size)
      fail(fn, ErrorKind::Format,
           "the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
               " tokens, the model's vocabulary " + std::to_string(c.vocab_size));
    Tokenizer::TokenList list = tokenizer.token_list();  // Error(Tokenizer) for char level
    std::vector<int32_t> types(list.types.begin(), list.types.end());
    meta.emplace_back("tokenizer.ggml.model", gguf::Value::string("gpt2"));
    meta.emplace_back("tokenizer.ggml.pre", gguf::Value::string("gpt-2"));
    meta.emplace_back("tokenizer.ggml.tokens", gguf::Value::strings(std::move(list.tokens)));
    meta.emplace_back("tokenizer.ggml.token_type", gguf::Value::i32s(types));
    meta.emplace_back("tokenizer.ggml.merges", gguf::Value::strings(std::move(list.merges)));
    if (c.bos_id >= 0)
      meta.emplace_back("tokenizer.ggml.bos_token_id",
                        gguf::Value::u32(static_cast<uint32_t>(c.bos_id)));
    if (c.eos_id >= 0)
      meta.emplace_back("tokenizer.ggml.eos_token_id",
                        gguf::Value::u32(static_cast<uint32_t>(c.eos_id)));
  }
  Weights w = weights_;  // handles
  gguf::NamedTensors tensors;
  for (const Slot& s : slots(c, w, !c.tie_word_embeddings))
    tensors.emplace_back(s.gguf, s.linear && s.t->dtype() == DType::F32 ? transposed(*s.t) : *s.t);
  try {
    gguf::save(path, meta, tensors);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(fn) + ": " + e.what());
  }
}

}  // namespace forge::gpt2
