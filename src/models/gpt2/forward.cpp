// The GPT-2 forward pass: one code path for the full forward, prefill and KV-cache decode.
//
//   x = wte[ids] + wpe[pos..pos+T)                       x: [B, T, C]
//   per block:  x += attn(ln_1(x));  x += mlp(ln_2(x))
//   logits = ln_f(x) @ wte^T (tied)                      logits: [B, T, V] or last [B, V]
//
// Everything runs through the ops in ops.h, so the same code serves every backend.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "forge/device_queue.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "models/gpt2/decode_graph.h"

namespace forge::gpt2 {
namespace {

[[noreturn]] void fail(const char* fn, ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(fn) + ": " + what);
}

/// Checks ids ([B, T] or [T]) and returns them as [B, T]. Reads them to the host once to
/// range-check every id (ids are tiny next to a forward pass).
Tensor checked_ids(const Tensor& ids, const Config& c, const char* fn) {
  if (!ids.defined()) fail(fn, ErrorKind::Shape, "ids is an undefined tensor");
  if (ids.dtype() != DType::U32)
    fail(fn, ErrorKind::DType, std::string("ids must be u32, got ") + dtype_name(ids.dtype()));
  if (ids.rank() != 1 && ids.rank() != 2)
    fail(fn, ErrorKind::Shape, "ids must be [B, T] or [T], got " + ids.shape().str());
  const Tensor ids2 = ids.rank() == 1 ? ids.reshape({1, ids.dim(0)}) : ids;
  if (ids2.dim(0) < 1 || ids2.dim(1) < 1)
    fail(fn, ErrorKind::Shape, "ids " + ids.shape().str() + " holds no tokens");
  const std::vector<uint32_t> host = ids2.to_vector<uint32_t>();
  c.check_token_ids(host.data(), host.size(), fn, ids2.dim(1));
  return ids2;
}

}  // namespace

namespace {

/// The transformer blocks on the residual stream x2 [R, C]; for each layer
///   x2 += attn(ln_1(x2));  x2 += mlp(ln_2(x2))
/// (x2 ends as a new tensor: the seams are out of place). `attend(l, qkv)` maps layer l's
/// qkv [R, 3C] to the heads' merged output [R, C] (the fused attention op, with the
/// positions and caches the caller has). The seams between sublayers (a residual update,
/// then the next layernorm and product) are single ops (matmul_add_layernorm_matmul: one
/// dispatch on a GPU for a decode step's row).
template <typename Attend>
void blocks(Tensor& x2, const std::vector<LayerWeights>& layers, float eps, const Attend& attend) {
  if (layers.empty()) return;
  // ln_1(x2) W + b: [R, 3C] (one kernel where the backend folds the layernorm in).
  Tensor qkv = layernorm_matmul(x2, layers[0].ln_1_w, layers[0].ln_1_b, eps, layers[0].attn_w, {},
                                layers[0].attn_b);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerWeights& L = layers[l];
    // x2 += attn @ W_proj + b, then gelu(ln_2(x2) W_fc + b): [R, 4C]
    ResidualProduct r =
        matmul_add_layernorm_matmul(x2, attend(l, qkv), L.attn_proj_w, L.attn_proj_b, L.ln_2_w,
                                    L.ln_2_b, eps, L.fc_w, {.gelu = true}, L.fc_b);
    x2 = std::move(r.x);
    if (l + 1 == layers.size()) {
      matmul_add_(x2, r.out, L.fc_proj_w, {}, L.fc_proj_b);
      break;
    }
    // x2 += f @ W_fc_proj + b, then the next layer's ln_1(x2) W + b.
    const LayerWeights& next = layers[l + 1];
    r = matmul_add_layernorm_matmul(x2, r.out, L.fc_proj_w, L.fc_proj_b, next.ln_1_w, next.ln_1_b,
                                    eps, next.attn_w, {}, next.attn_b);
    x2 = std::move(r.x);
    qkv = std::move(r.out);
  }
}

}  // namespace

std::shared_ptr<DecodeGraph> Model::decode_graph(KVCache& cache, bool greedy) const {
  const Weights& w = weights_;
  // The buffers the step reads and writes; a new step when any changed (weights replaced,
  // not updated in place, or another cache's buffers).
  std::vector<std::pair<const Storage*, size_t>> buffers;
  auto use = [&](const Tensor& t) { buffers.emplace_back(t.storage().get(), t.offset()); };
  use(w.wte);
  use(w.wpe);
  for (const LayerWeights& L : w.layers)
    for (const Tensor* t :
         {&L.ln_1_w, &L.ln_1_b, &L.attn_w, &L.attn_b, &L.attn_proj_w, &L.attn_proj_b, &L.ln_2_w,
          &L.ln_2_b, &L.fc_w, &L.fc_b, &L.fc_proj_w, &L.fc_proj_b})
      use(*t);
  use(w.ln_f_w);
  use(w.ln_f_b);
  if (w.lm_head.defined()) use(w.lm_head);
  for (const Tensor& t : cache.k_) use(t);
  for (const Tensor& t : cache.v_) use(t);
  std::shared_ptr<DecodeGraph>& g = greedy ? cache.greedy_graph_ : cache.graph_;
  if (g && g->buffers == buffers) return g;
  g.reset();  // frees the old step's buffers first
  auto ng = std::make_shared<DecodeGraph>();
  ng->buffers = std::move(buffers);
  ng->step = Tensor::empty({2}, DType::U32, device_);  // written before every run
  // The body holds its own handles (a copy of the model shares its weights), never this
  // Model or the cache, which may be gone when a later run calls it again.
  DecodeGraph* out = ng.get();
  ng->run = std::make_unique<RecordedStep>(
      device_, [out, model = *this, k = cache.k_, v = cache.v_, greedy] {
        const Config& c = model.config_;
        const Weights& mw = model.weights_;
        Tensor tok = out->step.narrow_rows(0, 1);        // [1]
        const Tensor pos = out->step.narrow_rows(1, 1);  // [1]
        Tensor x = embedding(tok, mw.wte, DeviceIds::trusted);
        add_(x, embedding(pos, mw.wpe, DeviceIds::trusted));  // x: [1, C]
        blocks(x, mw.layers, c.eps, [&](size_t i, const Tensor& qkv) {
          Tensor ki = k[i], vi = v[i];
          return attention_at(qkv.reshape({1, 1, 3 * c.n_embd}), c.n_head, ki, vi, pos)
              .reshape({1, c.n_embd});
        });
        out->logits = model.lm_head(layernorm(x, mw.ln_f_w, mw.ln_f_b, c.eps));  // [1, V]
        // Greedy: the chosen id becomes the next step's token, on the device.
        if (greedy) argmax_rows_into(out->logits, tok);
      });
  ng->run->record();  // before the host writes the first step's token and position
  g = std::move(ng);
  return g;
}

void Model::check_cache(const KVCache& cache, const char* fn) const {
  const Config& c = config_;
  if (cache.n_layer_ != c.n_layer || cache.n_head_ != c.n_head || cache.head_dim_ != c.head_dim())
    fail(fn, ErrorKind::Shape, "the KV cache was made for another model shape");
  if (cache.device_ != device_)
    fail(fn, ErrorKind::Device,
         "the KV cache is on " + cache.device_.str() + ", the model on " + device_.str());
}

Tensor Model::decode_replayed(uint32_t token, KVCache& cache) const {
  const std::shared_ptr<DecodeGraph> g = decode_graph(cache, /*greedy=*/false);
  const int64_t pos = cache.length_;
  g->step.copy_from(std::vector<uint32_t>{token, static_cast<uint32_t>(pos)});
  g->run->run();
  cache.length_ = pos + 1;
  if (!g->run->replays()) return g->logits;  // this run's own tensor
  // A copy the caller owns (a replay rewrites the step's logits); it joins the same submit.
  Tensor out = Tensor::empty(g->logits.shape(), DType::F32, device_);
  out.copy_from(g->logits);
  return out;
}

Tensor Model::run(const Tensor& ids_in, KVCache* cache, bool head, bool all, const char* fn) const {
  const Config& c = config_;
  const Tensor ids_checked = checked_ids(ids_in, c, fn);
  const int64_t B = ids_checked.dim(0), T = ids_checked.dim(1);
  const int64_t C = c.n_embd, H = c.n_head;
  const int64_t pos = cache ? cache->length_ : 0;
  if (cache) {
    check_cache(*cache, fn);
    if (B != cache->batch_)
      fail(fn, ErrorKind::Shape,
           "ids have batch " + std::to_string(B) + ", the KV cache holds " +
               std::to_string(cache->batch_) + " sequences");
    if (pos + T > cache->capacity_)
      fail(fn, ErrorKind::Range,
           "kv cache overflow: " + std::to_string(pos) + " cached + " + std::to_string(T) +
               " new tokens exceed its capacity of " + std::to_string(cache->capacity_));
  }
  if (pos + T > c.n_ctx)
    fail(fn, ErrorKind::Range,
         "context overflow: " + std::to_string(pos + T) + " positions exceed n_ctx = " +
             std::to_string(c.n_ctx) + " (truncate the input or evaluate in windows)");
  // A batch-1 decode step on a GPU that can capture: the recorded step, replayed (one
  // submit, no recording cost per token). The ids were range-checked above, on the host.
  if (cache && B == 1 && T == 1 && head && !all && RecordedStep::replays_on(device_))
    return decode_replayed(ids_checked.to_vector<uint32_t>()[0], *cache);
  // Host ids stay on the host: the embedding op uploads them with the recorded work (ids on
  // a GPU would be read back to be range-checked: a wait per token).
  const Tensor& ids = ids_checked;
  const Weights& w = weights_;

  // x: [B, T, C] = token embedding + position embedding (rows pos..pos+T of wpe, added per
  // sequence: a view, no gather needed).
  Tensor x = embedding(ids, w.wte);
  const Tensor pe = w.wpe.narrow_rows(pos, T);  // [T, C]
  for (int64_t b = 0; b < B; ++b) {
    Tensor xb = x.narrow_rows(b, 1).reshape({T, C});
    add_(xb, pe);
  }
  Tensor x2 = x.reshape({B * T, C});  // the residual stream as rows, same storage

  // Fused attention: with a cache, the new keys/values go to rows pos.. of the preallocated
  // caches and the queries attend to rows 0..pos+t; without, to the new positions only. The
  // [T, S] scores are never stored.
  blocks(x2, w.layers, c.eps, [&](size_t i, const Tensor& qkv) {
    const Tensor qkv3 = qkv.reshape({B, T, 3 * C});
    const Tensor y =
        cache ? attention(qkv3, H, cache->k_[i], cache->v_[i], pos) : attention(qkv3, H);
    return y.reshape({B * T, C});
  });
  if (cache) cache->length_ = pos + T;

  // Only the last position of each sequence is needed for the next token: select it
  // before ln_f and the LM head (the head is the largest matmul of a decode step).
  Tensor rows = x2;
  if (!all) {
    if (B == 1) {
      rows = x2.narrow_rows(T - 1, 1);
    } else {
      rows = Tensor::empty({B, C}, DType::F32, device_);
      for (int64_t b = 0; b < B; ++b) {
        Tensor dst = rows.narrow_rows(b, 1);
        dst.copy_from(x2.narrow_rows(b * T + T - 1, 1));
      }
    }
  }
  const Tensor hf = layernorm(rows, w.ln_f_w, w.ln_f_b, c.eps);  // [B*T or B, C]
  const Tensor out = head ? lm_head(hf) : hf;
  const int64_t width = head ? c.vocab_size : C;
  return all ? out.reshape({B, T, width}) : out.reshape({B, width});
}

Tensor Model::lm_head(const Tensor& h) const {
  const char* fn = "gpt2::Model::lm_head";
  if (!h.defined() || h.dtype() != DType::F32 || h.rank() < 1 || h.dim(-1) != config_.n_embd)
    fail(fn, ErrorKind::Shape,
         "h must be f32 [..., " + std::to_string(config_.n_embd) + "], got " +
             (h.defined() ? h.str() : "an undefined tensor"));
  if (h.device() != device_)
    fail(fn, ErrorKind::Device, "h is on " + h.device().str() + ", the model on " + device_.str());
  // h @ W^T as one product over h's rows (a rank-2 product: a backend may window it).
  MatmulSpec nt;
  nt.trans_b = true;
  const Tensor& w = weights_.lm_head.defined() ? weights_.lm_head : weights_.wte;
  std::vector<int64_t> dims = h.shape().dims();
  dims.back() = config_.vocab_size;
  return matmul(h.reshape({h.shape().rows(), config_.n_embd}), w, nt).reshape(Shape(dims));
}

Tensor Model::forward(const Tensor& ids) const {
  return run(ids, nullptr, true, true, "gpt2::Model::forward");
}

Tensor Model::hidden(const Tensor& ids) const {
  return run(ids, nullptr, false, true, "gpt2::Model::hidden");
}

Tensor Model::forward_cached(const Tensor& ids, KVCache& cache, bool all_logits) const {
  return run(ids, &cache, true, all_logits, "gpt2::Model::forward_cached");
}

}  // namespace forge::gpt2
