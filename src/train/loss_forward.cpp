// The training forward of GPT-2: the one definition of src/models/gpt2/definition.h over
// autograd Vars (the fused ops of autograd.h), with dropout at HF GPT2LMHeadModel's four
// sites, and the mean cross-entropy of the LM head.
//
//   loss = mean CE(ln_f(x) @ wte^T, targets)                     (tied: wte gets both grads)
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "forge/devices.h"
#include "forge/error.h"
#include "forge/ops.h"
#include "forge/train.h"
#include "models/gpt2/definition.h"

namespace forge::train {
namespace {

[[noreturn]] void fail(const char* fn, ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(fn) + ": " + what);
}

/// Checks ids (U32 [B, T], 1 <= T <= n_ctx, every id < V).
void check_ids(const char* fn, const char* what, const Tensor& ids, const gpt2::Config& c) {
  if (!ids.defined()) fail(fn, ErrorKind::Shape, std::string(what) + " is an undefined tensor");
  if (ids.dtype() != DType::U32)
    fail(fn, ErrorKind::DType, std::string(what) + " must be u32, got " + dtype_name(ids.dtype()));
  if (ids.rank() != 2 || ids.dim(0) < 1 || ids.dim(1) < 1)
    fail(fn, ErrorKind::Shape,
         std::string(what) + " must be [B, T] with B, T >= 1, got " + ids.shape().str());
  if (ids.dim(1) > c.n_ctx)
    fail(fn, ErrorKind::Range,
         std::string(what) + " " + ids.shape().str() +
             ": T exceeds n_ctx = " + std::to_string(c.n_ctx));
  const std::vector<uint32_t> host = ids.to_vector<uint32_t>();
  c.check_token_ids(host.data(), host.size(), (std::string(fn) + ": " + what).c_str(), ids.dim(1));
}

/// A block's weights as Vars, with gpt2::LayerWeights' names (definition.h reads them).
struct LayerVars {
  ag::Var ln_1_w, ln_1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
  ag::Var ln_2_w, ln_2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
};

struct VarWeights {
  ag::Var wte, wpe;
  std::vector<LayerVars> layers;
  ag::Var ln_f_w, ln_f_b, head;  // head: wte again when tied
};

/// definition.h's ops over Vars: the fused functions of autograd.h, dropout p with site s's
/// seed dropout_site_seed(seed, s), each sequence's elements keyed by their index in the
/// whole batch (the rows are sequences first_seq, first_seq + 1, ... of it).
struct VarOps {
  float p = 0;
  uint64_t seed = 0;
  int64_t B = 0, T = 0, C = 0, H = 0;
  int64_t first_seq = 0;
  std::function<ag::Var(const ag::Var&)> head;

  uint64_t at(uint64_t site) const { return dropout_site_seed(seed, site); }
  /// The mask index of this batch's first element, for a tensor of per_seq elements a sequence.
  uint64_t index0(int64_t per_seq) const { return static_cast<uint64_t>(first_seq * per_seq); }
  ag::Var embedding(const Tensor& ids, const ag::Var& table) const {
    return ag::embedding(ids, table);
  }
  ag::Var add(const ag::Var& a, const ag::Var& b) const { return ag::add(a, b); }
  ag::Var dropout(const ag::Var& x, uint64_t site) const {
    return ag::dropout(x, p, at(site), index0(x.shape().numel() / B));
  }
  ag::Var layernorm(const ag::Var& x, const ag::Var& g, const ag::Var& b, float eps) const {
    return ag::layernorm(x, g, b, eps);
  }
  ag::Var layernorm_matmul(const ag::Var& x, const ag::Var& g, const ag::Var& b, float eps,
                           const ag::Var& w, const MatmulSpec& spec, const ag::Var& bias) const {
    return ag::layernorm_matmul(x, g, b, eps, w, spec, bias);
  }
  std::pair<ag::Var, ag::Var> matmul_add_layernorm_matmul(
      const ag::Var& x, const ag::Var& a, const ag::Var& w1, const ag::Var& b1, const ag::Var& g,
      const ag::Var& beta, float eps, const ag::Var& w2, const MatmulSpec& spec, const ag::Var& b2,
      uint64_t site, const MatmulSpec& /*spec1*/) const {
    auto r = ag::matmul_add_layernorm_matmul(x, a, w1, b1, g, beta, eps, w2, spec, b2, p, at(site),
                                             index0(T * C));
    return {r[0], r[1]};
  }
  ag::Var matmul_add(const ag::Var& x, const ag::Var& a, const ag::Var& w,
                     const MatmulSpec& /*spec*/, const ag::Var& bias, uint64_t site) const {
    return ag::matmul_add(x, a, w, bias, p, at(site), index0(T * C));
  }
  // Training's weights are f32 [in, out] (train::parameters refuses others): no spec changes.
  MatmulSpec spec(const ag::Var& /*w*/, MatmulSpec s) const { return s; }
  ag::Var attention(size_t /*layer*/, const ag::Var& qkv, uint64_t site) const {
    const ag::Var y =
        ag::attention(ag::reshape(qkv, {B, T, 3 * C}), H, p, at(site), index0(H * T * T));
    return ag::reshape(y, {B * T, C});
  }
  ag::Var head_rows(const ag::Var& x) const { return x; }
};

}  // namespace

std::vector<ag::Parameter> parameters(gpt2::Model& model) {
  std::vector<ag::Parameter> out;
  for (auto& [name, t] : model.named_weights()) {
    if (!t.defined() || t.dtype() != DType::F32)
      fail("train::parameters", ErrorKind::DType, name + " is not a defined f32 tensor");
    out.emplace_back(t, name);
  }
  return out;
}

ag::Var loss_forward(ag::Tape& tape, const gpt2::Model& model,
                     const std::vector<ag::Parameter>& params, const Tensor& inputs,
                     const Tensor& targets, float dropout, uint64_t seed, int64_t first_sequence) {
  const char* fn = "train::loss_forward";
  const gpt2::Config& c = model.config();
  const gpt2::Weights& w = model.weights();
  // The parameters must be the model's, in parameters()' order (names and shapes checked;
  // the values may be copies, e.g. a model clone's).
  const auto expect = model.named_weights();
  if (params.size() != expect.size())
    fail(fn, ErrorKind::Shape,
         "got " + std::to_string(params.size()) + " parameters, the model has " +
             std::to_string(expect.size()) + " (pass train::parameters(model))");
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      fail(fn, ErrorKind::Shape, "parameter " + std::to_string(i) + " is empty");
    if (params[i].name() != expect[i].first ||
        params[i].value().shape() != expect[i].second.shape())
      fail(fn, ErrorKind::Shape,
           "parameter " + std::to_string(i) + " \"" + params[i].name() + "\" " +
               params[i].value().shape().str() + " does not match the model's \"" +
               expect[i].first + "\" " + expect[i].second.shape().str());
  }
  if (!(dropout >= 0.0f && dropout < 1.0f))
    fail(fn, ErrorKind::Range, "dropout must be in [0, 1), got " + std::to_string(dropout));
  if (first_sequence < 0)
    fail(fn, ErrorKind::Range,
         "first_sequence must be >= 0, got " + std::to_string(first_sequence));
  check_ids(fn, "inputs", inputs, c);
  check_ids(fn, "targets", targets, c);
  if (targets.shape() != inputs.shape())
    fail(fn, ErrorKind::Shape,
         "targets " + targets.shape().str() + " must have the inputs' shape " +
             inputs.shape().str());
  for (const Tensor* t : {&inputs, &targets})
    if (t->device() != model.device() && t->device() != Device::cpu())
      fail(fn, ErrorKind::Device,
           "inputs and targets must be on the CPU or the model's device " + model.device().str());

  const int64_t B = inputs.dim(0), T = inputs.dim(1);
  size_t k = 0;
  auto next = [&]() { return tape.param(params[k++]); };
  VarWeights vw;
  vw.wte = next();
  vw.wpe = next();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerVars L;
    for (ag::Var* v : {&L.ln_1_w, &L.ln_1_b, &L.attn_w, &L.attn_b, &L.attn_proj_w, &L.attn_proj_b,
                       &L.ln_2_w, &L.ln_2_b, &L.fc_w, &L.fc_b, &L.fc_proj_w, &L.fc_proj_b})
      *v = next();
    vw.layers.push_back(std::move(L));
  }
  vw.ln_f_w = next();
  vw.ln_f_b = next();
  // Tied: wte's Var again, so the LM head's gradient accumulates into it.
  vw.head = w.lm_head.defined() ? next() : vw.wte;

  // Positions are gathered like tokens (ids 0..T-1 per row) so that wpe's gradient is the
  // same scatter as wte's.
  std::vector<uint32_t> pos(static_cast<size_t>(B * T));
  for (size_t i = 0; i < pos.size(); ++i)
    pos[i] = static_cast<uint32_t>(i % static_cast<size_t>(T));
  VarOps ops;
  ops.p = dropout;
  ops.seed = seed;
  ops.first_seq = first_sequence;
  ops.B = B;
  ops.T = T;
  ops.C = c.n_embd;
  ops.H = c.n_head;
  // Logits [B*T, V] in blocks of rows that fit one binding of the device (one block on
  // the CPU, and on an H200 up to 21k rows).
  const uint64_t binding = device_info(model.device()).max_binding_bytes;
  const int64_t row_bytes = c.vocab_size * static_cast<int64_t>(sizeof(float));
  const int64_t block =
      binding == 0 ? B * T : std::max<int64_t>(1, static_cast<int64_t>(binding) / row_bytes);
  ops.head = [&](const ag::Var& hf) {
    return ag::lm_head_loss(hf, vw.head, targets.reshape({B * T}), block);
  };
  return gpt2::definition::forward(ops, vw, inputs.reshape({B * T}),
                                   Tensor::from_vector(pos, {B * T}),
                                   c.eps);  // host ids: see ops.h
}

}  // namespace forge::train
