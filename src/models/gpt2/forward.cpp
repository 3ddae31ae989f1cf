// The GPT-2 forward pass over tensors: prefill, KV-cache decode (one path for sequences at
// different positions), eval and the recorded decode step, all through the one definition
// of definition.h.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "forge/device_queue.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "models/gpt2/decode_graph.h"
#include "models/gpt2/definition.h"
#include "models/gpt2/weight_layout.h"

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

/// definition.h's ops over tensors: inference, so no dropout; the fused ops as ops.h has
/// them. `attend`, `head_rows` and `head` are the caller's (caches, row selection, LM head).
struct TensorOps {
  DeviceIds ids = DeviceIds::check;
  std::function<Tensor(size_t, const Tensor&)> attend;
  std::function<Tensor(const Tensor&)> head_rows = [](const Tensor& x) { return x; };
  std::function<Tensor(const Tensor&)> head = [](const Tensor& h) { return h; };

  Tensor embedding(const Tensor& i, const Tensor& table) const {
    return forge::embedding(i, table, ids);
  }
  Tensor add(Tensor a, const Tensor& b) const {
    add_(a, b);
    return a;
  }
  Tensor dropout(Tensor x, uint64_t /*site*/) const { return x; }
  Tensor layernorm(const Tensor& x, const Tensor& g, const Tensor& b, float eps) const {
    return forge::layernorm(x, g, b, eps);
  }
  Tensor layernorm_matmul(const Tensor& x, const Tensor& g, const Tensor& b, float eps,
                          const Tensor& w, const MatmulSpec& spec, const Tensor& bias) const {
    return forge::layernorm_matmul(x, g, b, eps, w, spec, bias);
  }
  std::pair<Tensor, Tensor> matmul_add_layernorm_matmul(
      const Tensor& x, const Tensor& a, const Tensor& w1, const Tensor& b1, const Tensor& g,
      const Tensor& beta, float eps, const Tensor& w2, const MatmulSpec& spec, const Tensor& b2,
      uint64_t /*site*/, const MatmulSpec& spec1) const {
    ResidualProduct r =
        forge::matmul_add_layernorm_matmul(x, a, w1, b1, g, beta, eps, w2, spec, b2, spec1);
    return {std::move(r.x), std::move(r.out)};
  }
  Tensor matmul_add(Tensor x, const Tensor& a, const Tensor& w, const MatmulSpec& spec,
                    const Tensor& bias, uint64_t /*site*/) const {
    matmul_add_(x, a, w, spec, bias);
    return x;
  }
  MatmulSpec spec(const Tensor& w, MatmulSpec s) const { return linear_spec(w, s); }
  Tensor attention(size_t l, const Tensor& qkv, uint64_t /*site*/) const { return attend(l, qkv); }
};

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
        Tensor tok = out->step.narrow_rows(0, 1);        // [1]
        const Tensor pos = out->step.narrow_rows(1, 1);  // [1]
        TensorOps ops;
        ops.ids = DeviceIds::trusted;  // written by the host after its range check
        ops.attend = [&](size_t i, const Tensor& qkv) {
          Tensor ki = k[i], vi = v[i];
          return attention_at(qkv.reshape({1, 1, 3 * c.n_embd}), c.n_head, ki, vi, pos)
              .reshape({1, c.n_embd});
        };
        ops.head = [&](const Tensor& h) { return model.lm_head(h); };
        out->logits = definition::forward(ops, model.weights_, tok, pos, c.eps);  // [1, V]
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
  const int64_t pos = cache.lengths_[0];
  g->step.copy_from(std::vector<uint32_t>{token, static_cast<uint32_t>(pos)});
  g->run->run();
  cache.lengths_[0] = pos + 1;
  if (!g->run->replays()) return g->logits;  // this run's own tensor
  // A copy the caller owns (a replay rewrites the step's logits); it joins the same submit.
  Tensor out = Tensor::empty(g->logits.shape(), DType::F32, device_);
  out.copy_from(g->logits);
  return out;
}

Tensor Model::run(const Tensor& ids, KVCache* cache, const std::vector<int64_t>& rows, bool head,
                  bool all, const char* fn) const {
  const Config& c = config_;
  const int64_t n = ids.dim(0), T = ids.dim(1);
  const int64_t C = c.n_embd, H = c.n_head;
  // Each sequence's first position: its cache row's length (0 without a cache).
  std::vector<int64_t> start(static_cast<size_t>(n), 0);
  if (cache) {
    check_cache(*cache, fn);
    std::vector<bool> seen(static_cast<size_t>(cache->batch_), false);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = rows[static_cast<size_t>(i)];
      if (r < 0 || r >= cache->batch_)
        fail(fn, ErrorKind::Range,
             "cache row " + std::to_string(r) + " outside [0, " + std::to_string(cache->batch_) +
                 ")");
      if (seen[static_cast<size_t>(r)])
        fail(fn, ErrorKind::Range, "cache row " + std::to_string(r) + " is named twice");
      seen[static_cast<size_t>(r)] = true;
      const int64_t pos = cache->lengths_[static_cast<size_t>(r)];
      start[static_cast<size_t>(i)] = pos;
      if (pos + T > cache->capacity_)
        fail(fn, ErrorKind::Range,
             "kv cache overflow: " + std::to_string(pos) + " cached + " + std::to_string(T) +
                 " new tokens" + (n > 1 ? " in row " + std::to_string(r) : std::string()) +
                 " exceed its capacity of " + std::to_string(cache->capacity_));
    }
  }
  const int64_t last = *std::max_element(start.begin(), start.end()) + T;
  if (last > c.n_ctx)
    fail(fn, ErrorKind::Range,
         "context overflow: " + std::to_string(last) + " positions exceed n_ctx = " +
             std::to_string(c.n_ctx) + " (truncate the input or evaluate in windows)");
  // A decode step of a one-sequence cache on a GPU that can capture: the recorded step,
  // replayed (one submit, no recording cost per token). The ids were range-checked, on the
  // host.
  if (cache && cache->batch_ == 1 && T == 1 && head && !all && RecordedStep::replays_on(device_))
    return decode_replayed(ids.to_vector<uint32_t>()[0], *cache);

  // Host ids stay on the host: the embedding op uploads them with the recorded work (ids on
  // a GPU would be read back to be range-checked: a wait per token).
  std::vector<uint32_t> pos(static_cast<size_t>(n * T));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < T; ++t)
      pos[static_cast<size_t>(i * T + t)] =
          static_cast<uint32_t>(start[static_cast<size_t>(i)] + t);

  TensorOps ops;
  // Fused attention: with a cache, the new keys/values go to rows start.. of the
  // preallocated caches and the queries attend to rows 0..start+t; without, to the new
  // positions only. The [T, S] scores are never stored. Sequences in consecutive cache rows
  // at one position attend in one call.
  ops.attend = [&](size_t l, const Tensor& qkv) {  // qkv: [n T, 3C] -> [n T, C]
    if (!cache) return attention(qkv.reshape({n, T, 3 * C}), H).reshape({n * T, C});
    Tensor y;
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1;
      while (j < n && rows[static_cast<size_t>(j)] == rows[static_cast<size_t>(j - 1)] + 1 &&
             start[static_cast<size_t>(j)] == start[static_cast<size_t>(i)])
        ++j;
      const int64_t r = rows[static_cast<size_t>(i)], m = j - i;
      const Tensor q = qkv.narrow_rows(i * T, m * T).reshape({m, T, 3 * C});
      const Tensor yi =
          attention(q, H, cache->k_[l].narrow_rows(r * H, m * H),
                    cache->v_[l].narrow_rows(r * H, m * H), start[static_cast<size_t>(i)])
              .reshape({m * T, C});
      if (i == 0 && j == n) return yi;
      if (!y.defined()) y = Tensor::empty({n * T, C}, DType::F32, device_);
      Tensor dst = y.narrow_rows(i * T, m * T);
      dst.copy_from(yi);
      i = j;
    }
    return y;
  };
  // Only the last position of each sequence is needed for the next token: select it
  // before ln_f and the LM head (the head is the largest matmul of a decode step).
  if (!all && T > 1)
    ops.head_rows = [&](const Tensor& x2) {
      if (n == 1) return x2.narrow_rows(T - 1, 1);
      Tensor rows_out = Tensor::empty({n, C}, DType::F32, device_);
      for (int64_t b = 0; b < n; ++b) {
        Tensor dst = rows_out.narrow_rows(b, 1);
        dst.copy_from(x2.narrow_rows(b * T + T - 1, 1));
      }
      return rows_out;
    };
  if (head) ops.head = [&](const Tensor& h) { return lm_head(h); };
  const Tensor out = definition::forward(ops, weights_, ids.reshape({n * T}),
                                         Tensor::from_vector(pos, {n * T}), c.eps);
  if (cache)
    for (int64_t i = 0; i < n; ++i)
      cache->lengths_[static_cast<size_t>(rows[static_cast<size_t>(i)])] += T;
  const int64_t width = head ? c.vocab_size : C;
  return all ? out.reshape({n, T, width}) : out.reshape({n, width});
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
  const char* fn = "gpt2::Model::forward";
  return run(checked_ids(ids, config_, fn), nullptr, {}, true, true, fn);
}

Tensor Model::hidden(const Tensor& ids) const {
  const char* fn = "gpt2::Model::hidden";
  return run(checked_ids(ids, config_, fn), nullptr, {}, false, true, fn);
}

Tensor Model::forward_cached(const Tensor& ids_in, KVCache& cache, bool all_logits) const {
  const char* fn = "gpt2::Model::forward_cached";
  const Tensor ids = checked_ids(ids_in, config_, fn);
  check_cache(cache, fn);
  if (ids.dim(0) != cache.batch_)
    fail(fn, ErrorKind::Shape,
         "ids have batch " + std::to_string(ids.dim(0)) + ", the KV cache holds " +
             std::to_string(cache.batch_) + " sequences");
  std::vector<int64_t> rows(static_cast<size_t>(cache.batch_));
  for (size_t b = 0; b < rows.size(); ++b) rows[b] = static_cast<int64_t>(b);
  return run(ids, &cache, rows, true, all_logits, fn);
}

Tensor Model::prefill(const Tensor& ids_in, KVCache& cache, int64_t row, bool all_logits) const {
  const char* fn = "gpt2::Model::prefill";
  const Tensor ids = checked_ids(ids_in, config_, fn);
  if (ids.dim(0) != 1)
    fail(fn, ErrorKind::Shape, "ids must be one sequence, [T] or [1, T], got " + ids.shape().str());
  return run(ids, &cache, {row}, true, all_logits, fn);
}

Tensor Model::decode(const std::vector<uint32_t>& tokens, const std::vector<int64_t>& rows,
                     KVCache& cache) const {
  const char* fn = "gpt2::Model::decode";
  if (tokens.empty() || tokens.size() != rows.size())
    fail(fn, ErrorKind::Shape,
         "needs one cache row per token, got " + std::to_string(tokens.size()) + " tokens and " +
             std::to_string(rows.size()) + " rows");
  config_.check_token_ids(tokens.data(), tokens.size(), fn);
  const auto n = static_cast<int64_t>(tokens.size());
  return run(Tensor::from_vector(tokens, {n, 1}), &cache, rows, true, false, fn);
}

}  // namespace forge::gpt2
