// Every tensor op forge has, declared once. Each function validates its inputs (shapes,
// devices, dtypes, index ranges), allocates the output on the inputs' device and calls that
// device's Backend kernel. Invalid input throws forge::Error whose message starts with the
// op's name, e.g. "matmul: inner dimensions differ: a [2, 3] vs b [4, 5]".
//
// Conventions: tensors are contiguous row-major; "rows" of a tensor are all dimensions but
// the last flattened together; every float op is F32; ids/targets are U32. All inputs of an
// op must be on one device.
#pragma once

#include <cstdint>
#include <vector>

#include "forge/tensor.h"

namespace forge {

// ----------------------------------------------------------------------------------------
// Forward ops
// ----------------------------------------------------------------------------------------

/// out = a + b. b has a's shape, or b is [C] with C = a.dim(-1) (added to every row).
Tensor add(const Tensor& a, const Tensor& b);
/// a += b in place (same broadcasting as add). Used to accumulate gradients.
void add_(Tensor& a, const Tensor& b);

/// GELU, tanh approximation ("gelu_new"):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& x);

/// How matmul reads its operands; see matmul.
struct MatmulSpec {
  bool trans_a = false;  // a is stored [K, M] (per batch) and used transposed
  bool trans_b = false;  // b is stored [N, K] (per batch) and used transposed
  float alpha = 1.0f;    // out = alpha * op(a) @ op(b) (+ bias)
  /// When > 0: use only the first b_rows stored rows of each b matrix (K = b_rows, or
  /// N = b_rows with trans_b). The batch stride of b stays the full stored matrix, so a
  /// preallocated KV cache [h, cap, hd] can be multiplied by its first `len` rows.
  int64_t b_rows = 0;
  /// Epilogue: out = gelu(alpha * op(a) @ op(b) + bias), the tanh GELU of `gelu` applied
  /// after the bias (the MLP's first product in one kernel). Not differentiable through
  /// ag::matmul (use ag::gelu there).
  bool gelu = false;
};

/// out = alpha * op(a) @ op(b) + bias (then gelu with spec.gelu).
///   a: [M, K] or [B, M, K]   (trans_a: [K, M] or [B, K, M])
///   b: [K, N] or [B, K, N]   (trans_b: [N, K] or [B, N, K]); b_rows may cut the stored rows
///   bias: undefined or [N]
///   out: [M, N], or [B, M, N] when either operand has a batch (a rank-2 operand is shared
///   by every batch; two rank-3 operands need equal B).
/// Weights of other dtypes (forge/dtype.h): b may be F16, BF16, Q8_0 or Q4_0, stored [N, K]
/// (out x in, as GGUF files and ggml store weights: blocks run along K) and used with
/// trans_b; a must be F32. F16/BF16 values are widened to f32 exactly and the product is the
/// f32 one. With Q8_0/Q4_0 the CPU rounds op(a) too, as llama.cpp does, and multiplies
/// integers: per block of 32 of a row of op(a), d = max|x| / 127 (f32), q = x * (1 / d)
/// rounded half to even, clamped to [-127, 127]; then
///   out[i, j] = sum over blocks of (d_w * d_a) * sum(q_a * q_w)    (float sum in f32)
/// where q_w are the weight's int8 values (Q8_0) or nibbles - 8 (Q4_0) and d_w its f16 scale.
/// A row's result depends neither on the other rows nor on the thread count.
/// Errors: ranks other than 2/3, inner dims differ, batch mismatch, b_rows > stored rows or
/// negative, bias not [N]; a non-f32 b that is not a 2-D matrix used with trans_b (Shape).
Tensor matmul(const Tensor& a, const Tensor& b, const MatmulSpec& spec = {},
              const Tensor& bias = Tensor());

/// In place: acc += [gelu](alpha * op(a) @ op(b) + bias), operands as in matmul; the
/// residual stream's x += y @ W + b in one kernel: matmul_add_(x, y, W, {}, b). Equals
/// add_(acc, matmul(a, b, spec, bias)) up to float rounding.
/// Errors: those of matmul; acc undefined, not F32, on another device, not exactly the
/// product's shape, or overlapping a, b or bias in memory.
void matmul_add_(Tensor& acc, const Tensor& a, const Tensor& b, const MatmulSpec& spec = {},
                 const Tensor& bias = Tensor());

/// Row softmax over the last dimension. With `causal`, x is [..., T, S] and row i (its
/// index along dim -2) sees columns j <= i + offset; masked entries of the output are exact
/// zeros (the mask is applied before the row max). Errors: rank 0; causal with rank < 2;
/// causal with i + offset >= S for the last row is allowed (nothing masked there).
Tensor softmax(const Tensor& x, bool causal = false, int64_t offset = 0);

/// LayerNorm over the last dimension C: (x - mean) / sqrt(var + eps) * gamma + beta,
/// biased variance. gamma, beta: [C].
Tensor layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps = 1e-5f);

/// How the embedding ops treat ids that are already on the table's GPU: read them back to
/// range-check them (a wait for all queued work), or trust the caller: a captured decode
/// step, whose host checks every token before writing it to the device. A trusted id out of
/// range leaves its output row unwritten; nothing is ever read outside the table.
enum class DeviceIds { check, trusted };

/// matmul(layernorm(x, gamma, beta, eps), w, spec, bias): the same result in one call, so
/// that a backend can normalize inside the product (a GPU: a decode step's row normalized
/// by every GEMV workgroup, one dispatch instead of two; bit for bit the two ops' result).
/// x: [R, K] or [B, R, K] normalized over K; gamma, beta: [K]; spec.trans_a is refused (the
/// rows of x are what is normalized). Errors: those of layernorm and matmul, named
/// "layernorm_matmul".
Tensor layernorm_matmul(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        const Tensor& w, const MatmulSpec& spec = {}, const Tensor& bias = {});

/// The seam between two pre-norm transformer sublayers, out of place:
///   x_new = x + (a @ w1 + b1)                      (what matmul_add_ leaves in x)
///   out   = layernorm_matmul(x_new, gamma, beta, eps, w2, spec2, b2)
/// x: [R, N1] or [B, R, N1]; a: x's rows with K1 columns; w1: [K1, N1] (spec1.trans_b:
/// [N1, K1], as weights of the 16-bit and block dtypes are stored; spec1 may set nothing
/// else); b1: [N1] or undefined; w2, b2, spec2 as for layernorm_matmul. Results equal those
/// ops' bit for bit.
/// A GPU may run both products in one dispatch (one row: the second product's
/// workgroups wait for the first's; x is only read, so a workgroup that cannot wait may
/// compute x_new itself). Errors: those of matmul_add_ and
/// layernorm_matmul, named "matmul_add_layernorm_matmul".
struct ResidualProduct {
  Tensor x;    // x_new, x's shape
  Tensor out;  // the second product
};
ResidualProduct matmul_add_layernorm_matmul(const Tensor& x, const Tensor& a, const Tensor& w1,
                                            const Tensor& b1, const Tensor& gamma,
                                            const Tensor& beta, float eps, const Tensor& w2,
                                            const MatmulSpec& spec2 = {}, const Tensor& b2 = {},
                                            const MatmulSpec& spec1 = {});

/// Row gather: out[..., :] = table[ids[...], :]. ids: U32 of any shape; table: [V, C];
/// out: ids.shape + [C]. Error(Range) if any id >= V.
///
/// Ids and targets of the index ops (embedding, scatter_add_rows,
/// gather_nll, ce_bwd) may stay on the CPU when the data is on a GPU: they are range-checked
/// on the host and uploaded with the recorded work, where ids already on a GPU must be read
/// back (a wait for all queued work) to be checked (unless DeviceIds::trusted).
Tensor embedding(const Tensor& ids, const Tensor& table, DeviceIds device_ids = DeviceIds::check);

/// Attention head split. qkv: [B, T, 3C] (or [T, 3C], B = 1), laid out q|k|v with heads
/// contiguous inside each part; part: 0 = q, 1 = k, 2 = v. Returns [B*n_head, T, C/n_head].
Tensor split_heads(const Tensor& qkv, int64_t n_head, int part);

/// Inverse of the head layout: x [B*n_head, T, hd] -> [B, T, n_head*hd].
Tensor merge_heads(const Tensor& x, int64_t n_head);

/// Fused causal self-attention (inference): split_heads + the new keys and values into the
/// caches + q k^T / sqrt(hd) + causal softmax + p v + merge_heads in one kernel, the [T, S]
/// scores never stored.
///   qkv: [B, T, 3C] (or [T, 3C], B = 1), laid out as split_heads expects;
///   C = n_head * hd.
///   k_cache, v_cache: both undefined, or both [B*n_head, cap, hd].
///   With caches, the keys and values of the T new positions are written to rows
///   pos..pos+T-1 of the caches (in place: a Tensor is a handle, the caller's caches see
///   them; other rows are untouched) and query t attends to cached rows 0..pos+t. Without
///   caches pos must be 0 and query t attends to the new positions 0..t.
/// Returns y: [B, T, C] (heads merged, like merge_heads):
///   y[b, t, h*hd + d] = sum_{s <= pos+t} softmax_s(q_t . k_s / sqrt(hd)) v_s[d].
/// Errors: qkv's rank/last dimension, n_head < 1 or not dividing C (Shape/Range), one cache
/// without the other, a cache shape other than [B*n_head, cap, hd] or caches of different
/// shapes (Shape), tensors on different devices (Device), pos < 0 or pos != 0 without
/// caches (Range), "kv overflow" (Range) if pos + T > cap. A GPU's kernels may
/// take only hd <= 128 (Unsupported beyond).
Tensor attention(const Tensor& qkv, int64_t n_head, Tensor k_cache = Tensor(),
                 Tensor v_cache = Tensor(), int64_t pos = 0);

/// attention() with caches whose position is a U32 [1] tensor on qkv's device instead of a
/// host integer: a decode step recorded once (Backend::begin_capture) and replayed at every
/// position, the host writing the position to `pos` before each replay. Same results as
/// attention(qkv, n_head, k_cache, v_cache, pos[0]), bit for bit on every backend.
/// The position is not read back from a GPU (that would wait for all queued work): there a
/// position beyond cap - T is clamped to cap - T, so nothing outside the caches is touched;
/// callers range-check it on the host. A position on the CPU is checked: Error(Range).
/// Errors: those of attention() with caches; pos not U32 [1] (DType/Shape) or on another
/// device (Device); Unsupported on a GPU backend without the kernel for it.
Tensor attention_at(const Tensor& qkv, int64_t n_head, Tensor k_cache, Tensor v_cache,
                    const Tensor& pos);

// ----------------------------------------------------------------------------------------
// Training ops (the backward rules of the ops above, the loss, the optimizer)
// ----------------------------------------------------------------------------------------

/// dx = dy * gelu'(x) for the tanh GELU above. x, dy: same shape.
Tensor gelu_bwd(const Tensor& x, const Tensor& dy);

/// dx = y * (dy - sum_row(y * dy)), y being softmax's output (masked entries are 0, so the
/// causal mask needs no flag here).
Tensor softmax_bwd(const Tensor& y, const Tensor& dy);

/// The gradient of attention(qkv, n_head) without caches: dqkv [B, T, 3C] (qkv's shape) from
/// dy [B, T, C], for training. `out` must be that attention's output (a fused kernel takes
/// the rows' sums D_t = dy_t . out_t from it); the composition on backends without one
/// recomputes the probabilities with the parts (split_heads, matmul, softmax) and runs their
/// backward rules, no [T, T] matrix kept between forward and backward either way.
/// Errors: qkv as attention's (Shape/Range), out or dy not F32 [B, T, C] (DType/Shape), tensors
/// on different devices (Device).
Tensor attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& dy, int64_t n_head);

struct LayerNormGrads {
  Tensor dx;      // x's shape
  Tensor dgamma;  // [C]
  Tensor dbeta;   // [C]
};
/// Gradients of layernorm(x, gamma, beta, eps) given dy (mean and rstd are recomputed).
LayerNormGrads layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy,
                             float eps = 1e-5f);

/// The index of each row's largest element: x [..., V] with N rows -> U32 [N]; the first
/// of equal maxima, NaN counted as -inf (a row of only -inf or NaN gives 0): the same ids
/// as forge::argmax (sampling.h) on every device. Greedy decoding on a GPU picks the next
/// token with it and reads back 4 bytes per row instead of the logits.
/// Error(Shape) if x has no columns (and rows), Error(Range) if V >= 2^32.
Tensor argmax_rows(const Tensor& x);
/// argmax_rows(x) written into `out`, U32 [N] on x's device (a view too: a captured decode
/// step writes its token where the next step reads it). Errors as argmax_rows, and
/// Shape / DType / Device for an `out` of another shape, type or device.
void argmax_rows_into(const Tensor& x, Tensor& out);

/// Column sums over all rows: x [..., C] -> [C] (the bias gradient).
Tensor sum_rows(const Tensor& x);

/// out = zeros([num_rows, C]); out[ids[i], :] += src[i, :] for every i, in index order per
/// row (deterministic, no atomics). ids: U32 [N] (any shape, N = numel); src: [..., C] with
/// N rows. The embedding gradient. Error(Range) if an id >= num_rows.
Tensor scatter_add_rows(const Tensor& ids, const Tensor& src, int64_t num_rows);

/// Per-row negative log-likelihood: out[i] = logsumexp(logits[i, :]) - logits[i, targets[i]].
/// logits: [..., V] with N rows; targets: U32 with N elements; out: [N].
/// Error(Range) if a target >= V.
Tensor gather_nll(const Tensor& logits, const Tensor& targets);

/// Cross-entropy backward: d[i, :] = (softmax(logits[i, :]) - onehot(targets[i])) * scale.
/// scale is usually dloss / N. Same shapes and errors as gather_nll.
Tensor ce_bwd(const Tensor& logits, const Tensor& targets, float scale);

/// The fused classifier: returns nll = gather_nll(logits, targets) and overwrites logits
/// with ce_bwd(logits, targets, 1) = softmax(logits) - onehot(targets), the gradient of the
/// summed nll (a loss's backward scales it, e.g. in its product's alpha). Bit for bit the two
/// ops; a GPU reads the logits once for both, and no second [N, V] buffer is needed. Same
/// shapes and errors as gather_nll; logits changes in place (every view of it sees the
/// gradient).
Tensor softmax_xent_(Tensor& logits, const Tensor& targets);

/// Inverted dropout with a counter-based mask: element i (flat index) is kept iff
/// (dropout_hash(seed, index0 + i) >> 8) >= dropout_threshold(p); kept elements are
/// multiplied by 1 / (1 - p) (computed once on the host, as float). p in [0, 1); p = 0
/// copies. index0 places x inside a larger tensor's mask: a slice of a batch (one rank's
/// sequences, a micro-batch) draws the whole batch's mask for its elements.
/// The backward of dropout is dropout of dy with the same seed, index0 and p.
Tensor dropout(const Tensor& x, float p, uint64_t seed, uint64_t index0 = 0);

/// Inverse of split_heads: dq, dk, dv [B*n_head, T, hd] -> dqkv [B, T, 3*n_head*hd].
Tensor unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t n_head);

/// Inverse of merge_heads: x [B, T, C] -> [B*n_head, T, C/n_head].
Tensor unmerge_heads(const Tensor& x, int64_t n_head);

/// Sum of squares of all elements, as a [1] tensor (accumulated in double on the CPU).
Tensor sumsq(const Tensor& x);

/// out = x * s.
Tensor scale(const Tensor& x, float s);
/// x *= s in place.
void scale_(Tensor& x, float s);

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based step count t, for the bias corrections
};
/// One AdamW update, in place, exactly as torch.optim.AdamW:
///   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
///   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
/// param, grad, m, v: same shape, F32, one device. Errors: shapes, lr < 0, betas outside
/// [0, 1), eps <= 0, step < 1.
void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p);

// ----------------------------------------------------------------------------------------
// The dropout mask, spelled out so that every backend (and every test) computes it alike.
// ----------------------------------------------------------------------------------------

/// "lowbias32" integer finalizer: a bijection on 32 bits with strong avalanche.
constexpr uint32_t hash_mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

/// 32 random bits for element `index` under `seed`; 32-bit operations only (GPU-friendly).
constexpr uint32_t dropout_hash(uint64_t seed, uint64_t index) {
  uint32_t h = hash_mix32(static_cast<uint32_t>(index) ^ static_cast<uint32_t>(seed));
  return hash_mix32(h ^ static_cast<uint32_t>(seed >> 32) ^
                    (static_cast<uint32_t>(index >> 32) * 0x9E3779B9U));
}

/// Keep threshold on the top 24 bits of the hash: floor(p * 2^24).
constexpr uint32_t dropout_threshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 16777216.0);
}

/// A distinct seed per dropout site (layer, place, step) from one run seed: splitmix64.
constexpr uint64_t dropout_site_seed(uint64_t seed, uint64_t site) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (site + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace forge
