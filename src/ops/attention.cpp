// Fused causal self-attention (inference, optionally over a KV cache) and its gradient for
// training. Validation and dispatch only; the kernels are each backend's
// (src/backend/cpu/attention.cpp on the CPU; attention_bwd composes where a backend has none).
#include <string>

#include "forge/ops.h"
#include "ops/check.h"

namespace forge {
using namespace ops_detail;

namespace {

/// Checks qkv and (when given) the caches; returns qkv's dimensions.
QkvDims check_attention(const char* op, const Tensor& qkv, int64_t n_head, const Tensor& k_cache,
                        const Tensor& v_cache) {
  const QkvDims d = check_qkv(op, qkv, n_head);
  const int64_t hd = d.C / n_head;
  const int64_t G = dim_mul(op, d.B, n_head);  // (batch, head) pairs
  if (k_cache.defined() != v_cache.defined())
    fail(ErrorKind::Shape, op,
         std::string("k_cache and v_cache must both be given or both be undefined, got ") +
             (k_cache.defined() ? "only k_cache" : "only v_cache"));
  if (!k_cache.defined()) return d;
  check_f32(op, "k_cache", k_cache);
  check_f32(op, "v_cache", v_cache);
  check_rank(op, "k_cache", k_cache, 3, 3);
  check_same_shape(op, "k_cache", k_cache, "v_cache", v_cache);
  if (k_cache.dim(0) != G || k_cache.dim(2) != hd)
    fail(ErrorKind::Shape, op,
         "cache " + k_cache.shape().str() + " does not fit qkv " + qkv.shape().str() +
             " with n_head " + std::to_string(n_head) + " (need [" + std::to_string(G) + ", cap, " +
             std::to_string(hd) + "])");
  return d;
}

/// pos > cap - T rather than pos + T > cap: no overflow for huge pos.
void check_pos(const char* op, int64_t pos, int64_t T, int64_t cap) {
  if (pos > cap - T)
    fail(ErrorKind::Range, op,
         "kv overflow: pos " + std::to_string(pos) + " + " + std::to_string(T) +
             " new rows > capacity " + std::to_string(cap));
}

}  // namespace

Tensor attention(const Tensor& qkv, int64_t n_head, Tensor k_cache, Tensor v_cache, int64_t pos) {
  const char* op = "attention";
  const QkvDims d = check_attention(op, qkv, n_head, k_cache, v_cache);
  Backend& be = same_device(op, {&qkv, &k_cache, &v_cache});
  const bool cached = k_cache.defined();
  if (pos < 0) fail(ErrorKind::Range, op, "pos must be >= 0, got " + std::to_string(pos));
  if (!cached && pos != 0)
    fail(ErrorKind::Range, op,
         "pos " + std::to_string(pos) + " without a KV cache (only the new positions exist)");
  if (cached) check_pos(op, pos, d.T, k_cache.dim(1));
  Tensor out = Tensor::empty(Shape::checked({d.B, d.T, d.C}, op), DType::F32, qkv.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.n_head = n_head;
    at.pos = pos;
    run(be, op, Op::attention, {&qkv}, {&k_cache, &v_cache, &out}, at);
  }
  return out;
}

Tensor attention_at(const Tensor& qkv, int64_t n_head, Tensor k_cache, Tensor v_cache,
                    const Tensor& pos) {
  const char* op = "attention_at";
  if (!k_cache.defined() || !v_cache.defined())
    fail(ErrorKind::Shape, op, "needs both caches (the position indexes them)");
  check_u32(op, "pos", pos);
  if (pos.numel() != 1)
    fail(ErrorKind::Shape, op, "pos must hold one position, got " + pos.shape().str());
  const QkvDims d = check_attention(op, qkv, n_head, k_cache, v_cache);
  Backend& be = same_device(op, {&qkv, &k_cache, &v_cache, &pos});
  if (k_cache.dim(1) < d.T)
    fail(ErrorKind::Range, op,
         "kv overflow: " + std::to_string(d.T) + " new rows > capacity " +
             std::to_string(k_cache.dim(1)));
  // Host data is checked for free; a GPU's would need a wait (the kernel clamps instead).
  if (pos.device().is_cpu()) check_pos(op, pos.to_vector<uint32_t>()[0], d.T, k_cache.dim(1));
  Tensor out = Tensor::empty(Shape::checked({d.B, d.T, d.C}, op), DType::F32, qkv.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.n_head = n_head;
    run(be, op, Op::attention_at, {&qkv, &pos}, {&k_cache, &v_cache, &out}, at);
  }
  return out;
}

Tensor attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& dy, int64_t n_head) {
  const char* op = "attention_bwd";
  const QkvDims d = check_qkv(op, qkv, n_head);
  check_f32(op, "out", out);
  check_f32(op, "dy", dy);
  const Shape y_shape = Shape::checked({d.B, d.T, d.C}, op);
  if (out.shape() != y_shape)
    fail(ErrorKind::Shape, op,
         "out must be attention's output " + y_shape.str() + " for qkv " + qkv.shape().str() +
             ", got " + out.shape().str());
  check_same_shape(op, "out", out, "dy", dy);
  Backend& be = same_device(op, {&qkv, &out, &dy});
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, qkv.device());
  if (dqkv.numel() > 0) {
    OpAttrs at;
    at.n_head = n_head;
    run(be, op, Op::attention_bwd, {&qkv, &out, &dy}, {&dqkv}, at);
  }
  return dqkv;
}

}  // namespace forge
