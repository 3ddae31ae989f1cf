// The training forward of GPT-2 over autograd: src/models/gpt2/forward.cpp's full forward
// written with ag:: functions, plus dropout at HF GPT2LMHeadModel's four sites and the
// mean cross-entropy.
//
//   x = drop(wte[ids] + wpe[pos])                                x: [B*T, C]
//   per block l:
//     a = drop(softmax_causal(q k^T / sqrt(hd)))                 a: [B*H, T, T]
//     x = x + drop(merge_heads(a v) @ Wproj + bproj)
//     x = x + drop(gelu(ln_2(x) @ Wfc + bfc) @ Wfcproj + bfcproj)
//   loss = mean CE(ln_f(x) @ wte^T, targets)                     (tied: wte gets both grads)
//
// Dropout sites, in HF order (site s draws its mask with dropout_site_seed(seed, s)):
//   0: embeddings; 1 + 3 l: attention probabilities of block l; 2 + 3 l: attention output
//   (after c_proj); 3 + 3 l: MLP output (after c_proj).
#include <cmath>
#include <string>

#include "forge/devices.h"
#include "forge/error.h"
#include "forge/ops.h"
#include "forge/train.h"

namespace forge::train {
namespace {

[[noreturn]] void fail(const char* fn, ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(fn) + ": " + what);
}

/// Checks ids (U32 [B, T], 1 <= T <= n_ctx, every id < V) and returns them.
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
  for (size_t i = 0; i < host.size(); ++i)
    if (static_cast<int64_t>(host[i]) >= c.vocab_size)
      fail(fn, ErrorKind::Range,
           std::string(what) + " holds id " + std::to_string(host[i]) + " at flat index " +
               std::to_string(i) +
               ", outside the vocabulary (vocab_size = " + std::to_string(c.vocab_size) + ")");
}

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
                     const Tensor& targets, float dropout, uint64_t seed) {
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
  const int64_t C = c.n_embd, H = c.n_head, hd = c.head_dim();
  size_t k = 0;
  auto next = [&]() { return tape.param(params[k++]); };
  auto drop = [&](const ag::Var& x, uint64_t site) {
    return ag::dropout(x, dropout, dropout_site_seed(seed, site));
  };

  // Token + position embeddings. Positions are gathered like tokens (ids 0..T-1 per row) so
  // that wpe's gradient is the same scatter as wte's.
  const ag::Var wte = next();
  const ag::Var wpe = next();
  std::vector<uint32_t> pos(static_cast<size_t>(B * T));
  for (size_t i = 0; i < pos.size(); ++i)
    pos[i] = static_cast<uint32_t>(i % static_cast<size_t>(T));
  const Tensor pos_ids = Tensor::from_vector(pos, {B, T});  // host ids: see ops.h
  const ag::Var tok = ag::embedding(inputs, wte);
  ag::Var x = ag::add(ag::reshape(tok, {B * T, C}),
                      ag::reshape(ag::embedding(pos_ids, wpe), {B * T, C}));  // [B*T, C]
  x = drop(x, 0);

  const float att_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const ag::Var ln1w = next(), ln1b = next(), attn_w = next(), attn_b = next();
    const ag::Var proj_w = next(), proj_b = next(), ln2w = next(), ln2b = next();
    const ag::Var fc_w = next(), fc_b = next(), fcp_w = next(), fcp_b = next();
    const uint64_t site = 1 + 3 * static_cast<uint64_t>(l);
    // --- attention ---
    const ag::Var h = ag::layernorm(x, ln1w, ln1b, c.eps);  // [B*T, C]
    const ag::Var qkv = ag::reshape(ag::matmul(h, attn_w, {}, attn_b), {B, T, 3 * C});
    const auto [q, kk, v] = ag::split_qkv(qkv, H);  // [B*H, T, hd]
    MatmulSpec qk;
    qk.trans_b = true;
    qk.alpha = att_scale;
    ag::Var att = ag::softmax(ag::matmul(q, kk, qk), true);  // [B*H, T, T]
    att = drop(att, site);
    const ag::Var y = ag::reshape(ag::merge_heads(ag::matmul(att, v), H), {B * T, C});
    x = ag::add(x, drop(ag::matmul(y, proj_w, {}, proj_b), site + 1));
    // --- MLP ---
    const ag::Var h2 = ag::layernorm(x, ln2w, ln2b, c.eps);
    const ag::Var f = ag::gelu(ag::matmul(h2, fc_w, {}, fc_b));  // [B*T, 4C]
    x = ag::add(x, drop(ag::matmul(f, fcp_w, {}, fcp_b), site + 2));
  }
  const ag::Var lnfw = next(), lnfb = next();
  const ag::Var hf = ag::layernorm(x, lnfw, lnfb, c.eps);  // [B*T, C]
  // Tied: wte's Var again, so the LM head's gradient accumulates into it.
  const ag::Var head = w.lm_head.defined() ? next() : wte;
  // Logits [B*T, V] in blocks of rows that fit one binding of the device (one block on
  // the CPU, and on an H200 up to 21k rows).
  const uint64_t binding = device_info(model.device()).max_binding_bytes;
  const int64_t row_bytes = c.vocab_size * static_cast<int64_t>(sizeof(float));
  const int64_t block =
      binding == 0 ? B * T : std::max<int64_t>(1, static_cast<int64_t>(binding) / row_bytes);
  return ag::lm_head_loss(hf, head, targets.reshape({B * T}), block);
}

}  // namespace forge::train
