// Independent float64 references for every op of include/forge/ops.h, written from the
// semantics stated there as plain loops. Nothing here calls forge, so a wrong kernel cannot
// make its own reference agree with it. Inputs are the float32 values the kernels see,
// widened to double; outputs are double.
//
// Layout conventions follow ops.h: row-major, "rows" = all dimensions but the last.
#pragma once

#include <cstdint>
#include <vector>

namespace forge::ref {

using Vec = std::vector<double>;
using Ids = std::vector<uint32_t>;

/// Widens float data to double.
Vec widen(const std::vector<float>& x);

/// out[r, c] = a[r, c] + b[r, c], or + b[c] when b has `cols` elements (row broadcast).
Vec add(const Vec& a, const Vec& b, int64_t cols);

/// The tanh GELU and its derivative.
double gelu(double x);
double gelu_grad(double x);
Vec gelu(const Vec& x);
/// dx = dy * gelu'(x).
Vec gelu_bwd(const Vec& x, const Vec& dy);

/// Describes one (possibly batched) matmul as ops.h stores its operands.
struct MatmulDims {
  int64_t batch = 1;       // output batch count (1 when neither operand is batched)
  bool a_batched = false;  // a holds `batch` matrices; else one matrix shared by all
  bool b_batched = false;
  int64_t m = 0, k = 0, n = 0;
  bool trans_a = false;       // a stored [K, M] per batch
  bool trans_b = false;       // b stored [N, K] per batch
  int64_t b_stored_rows = 0;  // rows of each stored b matrix (>= K, or >= N with trans_b)
  double alpha = 1.0;
  bool gelu = false;  // the epilogue gelu(...) after the bias
};
/// out: [batch, m, n] = alpha * op(a) @ op(b) (+ bias[n] if bias is non-empty), then gelu
/// of that with d.gelu.
/// If abs_sum is given it receives, per output element, |alpha| * sum_k |a_ik b_kj| + |bias_j|:
/// the magnitude that scales the float32 rounding error of the long reduction.
Vec matmul(const Vec& a, const Vec& b, const Vec& bias, const MatmulDims& d,
           Vec* abs_sum = nullptr);
/// Rows of whole blocks of 32 values as the quantized products round their activations
/// (forge/ops.h, matmul): per block of 32, d = max|x| / 127 and q = round_half_even(x / d)
/// clamped to [-127, 127], the steps in float32 as the kernels take them; returns d * q.
Vec round_rows_q8(const std::vector<float>& x);
/// matmul_add_: acc + matmul(a, b, bias, d) (acc: [batch, m, n]); abs_sum as for matmul.
Vec matmul_add(const Vec& acc, const Vec& a, const Vec& b, const Vec& bias, const MatmulDims& d,
               Vec* abs_sum = nullptr);

/// Softmax over the last dimension of x with shape `dims`. With `causal`, row i (its index
/// along dim -2) sees columns j <= i + offset; masked outputs are exactly 0.
Vec softmax(const Vec& x, const std::vector<int64_t>& dims, bool causal, int64_t offset);
/// dx = y * (dy - sum_row(y * dy)).
Vec softmax_bwd(const Vec& y, const Vec& dy, int64_t cols);

/// (x - mean) / sqrt(var + eps) * gamma + beta per row of C elements, biased variance.
Vec layernorm(const Vec& x, const Vec& gamma, const Vec& beta, int64_t cols, double eps);
struct LayerNormGrads {
  Vec dx, dgamma, dbeta;
  Vec dgamma_abs, dbeta_abs;  // sum over rows of |terms|, for reduction tolerances
};
LayerNormGrads layernorm_bwd(const Vec& x, const Vec& gamma, const Vec& dy, int64_t cols,
                             double eps);

/// out[i, :] = table[ids[i], :], table [V, cols].
Vec embedding(const Ids& ids, const Vec& table, int64_t cols);

/// qkv [B, T, 3*H*D] -> [B*H, T, D], taking part 0 (q), 1 (k) or 2 (v).
Vec split_heads(const Vec& qkv, int64_t B, int64_t T, int64_t H, int64_t D, int part);
/// x [B*H, T, D] -> [B, T, H*D].
Vec merge_heads(const Vec& x, int64_t B, int64_t T, int64_t H, int64_t D);
/// dq, dk, dv [B*H, T, D] -> [B, T, 3*H*D].
Vec unsplit_head(const Vec& dq, const Vec& dk, const Vec& dv, int64_t B, int64_t T, int64_t H,
                 int64_t D);
/// x [B, T, H*D] -> [B*H, T, D].
Vec unmerge_heads(const Vec& x, int64_t B, int64_t T, int64_t H, int64_t D);

/// Fused causal attention (ops.h attention), straight from its formula. qkv [B, T, 3*H*D];
/// k_cache, v_cache [B*H, cap, D], or both empty (no cache: pos must be 0, keys are the new
/// positions). Fills y [B, T, H*D] and, with caches, their expected contents afterwards
/// (rows pos..pos+T-1 replaced by the new keys/values, every other row as given).
struct Attention {
  Vec y, k_cache, v_cache;
};
Attention attention(const Vec& qkv, int64_t B, int64_t T, int64_t H, int64_t D, const Vec& k_cache,
                    const Vec& v_cache, int64_t cap, int64_t pos);

/// The gradient of attention without caches (ops.h attention_bwd): dqkv [B, T, 3*H*D] from
/// qkv and dy [B, T, H*D], through P = softmax(q k^T / sqrt(D), causal):
///   dv = P^T dy, dS = P * (dy v^T - rowsum(P * (dy v^T))), dq = dS k / sqrt(D),
///   dk = dS^T q / sqrt(D). abs_sum: per element, the sum of |terms| of its reduction.
Vec attention_bwd(const Vec& qkv, const Vec& dy, int64_t B, int64_t T, int64_t H, int64_t D,
                  Vec* abs_sum = nullptr);

/// Column sums of x [rows, cols]; abs_sum gets the column sums of |x|.
Vec sum_rows(const Vec& x, int64_t cols, Vec* abs_sum = nullptr);
/// zeros([num_rows, cols]); out[ids[i], :] += src[i, :]. abs_sum: the same with |src|.
Vec scatter_add_rows(const Ids& ids, const Vec& src, int64_t num_rows, int64_t cols,
                     Vec* abs_sum = nullptr);
/// out[i] = logsumexp(logits[i, :]) - logits[i, targets[i]].
Vec gather_nll(const Vec& logits, const Ids& targets, int64_t cols);
/// d[i, :] = (softmax(logits[i, :]) - onehot(targets[i])) * scale.
Vec ce_bwd(const Vec& logits, const Ids& targets, int64_t cols, double scale);

/// The dropout hash of ops.h, re-derived from its formula with 64-bit arithmetic and masks
/// (not the header's 32-bit code), so a mistake in either shows up.
uint32_t dropout_hash(uint64_t seed, uint64_t index);
/// True if element `index` survives dropout with probability p under `seed`.
bool dropout_keep(uint64_t seed, uint64_t index, float p);
/// Inverted dropout: kept x * float(1 / (1 - p)), dropped 0; element i keyed by index0 + i.
Vec dropout(const Vec& x, float p, uint64_t seed, uint64_t index0 = 0);

/// Sum of squares of all elements.
double sumsq(const Vec& x);
/// x * s.
Vec scale(const Vec& x, double s);

struct AdamWState {
  Vec param, m, v;
};
/// One torch.optim.AdamW step (decoupled weight decay), updating `s` in place.
void adamw(AdamWState& s, const Vec& grad, double lr, double beta1, double beta2, double eps,
           double weight_decay, int64_t step);

}  // namespace forge::ref
