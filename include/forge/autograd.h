// Reverse-mode automatic differentiation over the ops of ops.h.
//
// A Tape records every differentiable function applied to Vars; Tape::backward walks the
// records in reverse recording order and runs each op's backward rule (the training ops of
// ops.h), accumulating gradients with add_ when a Var feeds several ops (tied weights).
//
//   forge::ag::Parameter wte(Tensor::... [V, C]), ...;   // live across steps
//   for each micro-batch:
//     forge::ag::Tape tape;
//     Var w = tape.param(wte);                             // grads flow into wte.grad()
//     Var h = ag::embedding(ids, w);                       // ids: U32 [B, T]
//     ...
//     Var loss = ag::cross_entropy(ag::matmul(h, w, {.trans_b = true}), targets);
//     tape.backward(ag::scale(loss, 1.0f / n_micro));      // wte.grad() += dloss/dwte / n
//   ag::clip_grad_norm(params, 1.0f); adamw(...); ag::zero_grad(params);
//
// Var is a cheap handle (shared pointer) to a node holding a value Tensor and, after
// backward, its gradient. Parameter is a handle to a trainable tensor that outlives tapes and
// keeps its gradient across backward passes (gradient accumulation over micro-batches).
//
// Memory: a tape keeps every recorded op's saved tensors until backward, which releases each
// record as soon as its rule has run and frees intermediate gradients once consumed. Only
// leaves (tape.leaf with requires_grad, parameters) and Vars marked retain_grad() keep a
// gradient after backward. A Tape is single-threaded.
//
// Errors (forge::Error, message starting with the function's name, e.g. "ag::matmul: ..."):
// undefined Vars, Vars of different tapes in one op, a Var whose tape was destroyed,
// recording on or running backward of a tape that already ran backward, backward of a
// non-scalar without a seed gradient, plus every error of the underlying op (whose message
// starts with that op's name, e.g. "matmul: inner dimensions differ ...").
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "forge/ops.h"
#include "forge/tensor.h"

namespace forge::ag {

namespace detail {
struct Node;
struct ParamState;
struct TapeState;
struct Access;
}  // namespace detail

/// A trainable tensor with a gradient that survives tapes. Copies share the same state (it
/// is a handle, like shared_ptr: const methods may change the shared state), so a model can
/// hold its Parameters and a training loop a list of the same.
class Parameter {
 public:
  Parameter() = default;  // an empty handle: defined() == false
  /// Wraps `value` (F32, defined; Error(DType/Shape) otherwise) without copying: optimizer
  /// updates through value() change the caller's tensor too.
  explicit Parameter(Tensor value, std::string name = {}, bool requires_grad = true);

  bool defined() const { return state_ != nullptr; }
  const std::string& name() const;
  /// The parameter's tensor (Error(Shape) on an empty handle), for optimizer updates.
  Tensor& value() const;
  /// The accumulated gradient (value's shape), or an undefined Tensor when no backward pass
  /// has reached this parameter since construction or the last zero_grad().
  const Tensor& grad() const;
  bool has_grad() const;
  /// Forgets the gradient (grad() becomes undefined, like PyTorch's set_to_none) but keeps
  /// its buffer: the next backward writes into it instead of allocating. A caller still
  /// holding the old grad() handle sees that buffer overwritten.
  void zero_grad() const;
  bool requires_grad() const;
  /// A frozen parameter (false) gets no gradient from tapes recorded afterwards.
  void set_requires_grad(bool requires_grad) const;

 private:
  std::shared_ptr<detail::ParamState> state_;
  friend struct detail::Access;
};

/// A differentiable value on one tape: a handle to a node with `value` and `grad`.
class Var {
 public:
  Var() = default;  // an empty handle: defined() == false
  bool defined() const { return node_ != nullptr; }
  /// The forward value. Error(Shape) "Var::value: undefined Var" for an empty handle.
  const Tensor& value() const;
  const Shape& shape() const { return value().shape(); }
  /// The value of a one-element F32 Var (a loss) read to the host (a sync on GPUs).
  /// Error(Shape) unless numel == 1, Error(DType) unless F32.
  float item() const;
  /// The gradient after backward: for leaves (and parameters: the parameter's accumulated
  /// gradient) and for Vars marked retain_grad(); otherwise undefined (freed during
  /// backward, or no gradient reached this Var).
  const Tensor& grad() const;
  /// True if a gradient is computed for this Var (a leaf/parameter with requires_grad, or
  /// the output of an op with at least one such input).
  bool requires_grad() const;
  /// Keeps this intermediate Var's gradient after backward (for inspection and tests).
  void retain_grad();

 private:
  std::shared_ptr<detail::Node> node_;
  friend struct detail::Access;
};

/// Records differentiable ops. Non-copyable; movable. Vars outlive their tape (values stay
/// readable) but cannot be used in new ops after it is destroyed.
class Tape {
 public:
  Tape();
  ~Tape();
  Tape(Tape&&) noexcept;
  Tape& operator=(Tape&&) noexcept;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  /// A leaf Var holding `value` (shared, not copied). requires_grad needs an F32 value.
  Var leaf(const Tensor& value, bool requires_grad = true);
  /// A leaf Var for a parameter: backward adds this tape's gradient into p.grad(). Calling
  /// it several times for one parameter is fine (every use accumulates).
  Var param(const Parameter& p);

  /// Backpropagates from a one-element `loss` (any shape with numel 1) with seed gradient 1.
  /// Errors: loss undefined, of another tape, not requiring grad, numel != 1; backward
  /// already run on this tape.
  void backward(const Var& loss);
  /// Backpropagates from `root` with an explicit seed gradient of root's shape (F32, same
  /// device).
  void backward(const Var& root, const Tensor& seed);
  /// Backpropagates from a one-element `root` with seed gradient `seed` (a training step's
  /// 1 / micro-batches): rules that need the value as a number take it from the host, so
  /// the backward pass reads nothing from the device.
  void backward(const Var& root, float seed);
  /// As above, and calls ready(p) once for every parameter p of this tape as soon as the walk
  /// has given p its last gradient contribution of this pass (the earliest record that reads
  /// p), in the order that happens: a data-parallel trainer starts summing p's gradient
  /// across processes while the rest of the backward pass runs. The order depends only on
  /// what was recorded, so processes that recorded the same ops see the same order.
  using GradReady = std::function<void(const Parameter&)>;
  void backward(const Var& root, float seed, const GradReady& ready);

  /// Ops recorded and not yet released by backward.
  size_t num_records() const;
  /// True once backward has run (the tape then accepts no new ops).
  bool backward_done() const;
  /// The ops recorded and not yet released, in recording order, by the names of ops.h's
  /// functions ("embedding", "layernorm_matmul", ...): a fused function below appears once,
  /// under its own name, however many parts it recorded; views (reshape) are not ops.
  std::vector<std::string> recorded_ops() const;

 private:
  void backward(const Var& root, const Tensor& seed, const float* host_seed,
                const GradReady* ready = nullptr);
  std::shared_ptr<detail::TapeState> state_;
  friend struct detail::Access;
};

// ----------------------------------------------------------------------------------------
// Differentiable functions. Shapes, semantics and errors as the same-named op in ops.h;
// integer inputs (ids, targets) are plain Tensors. All Var inputs must share one tape. An
// output requires grad iff some Var input does; otherwise nothing is recorded.
// ----------------------------------------------------------------------------------------

/// a + b, b of a's shape or [C] (row broadcast; its gradient is sum_rows(dy)).
Var add(const Var& a, const Var& b);

/// out = alpha * op(a) @ op(b) + bias (bias undefined or [N]), every MatmulSpec flag. The
/// backward runs matmuls with transpose flags (no transposes are materialized) and sums
/// over the batch when a rank-2 operand was shared by every batch. With spec.b_rows > 0, b
/// must not require grad, and with a rank-3 b and trans_a, neither may a:
/// Error(Unsupported) at recording time.
Var matmul(const Var& a, const Var& b, const MatmulSpec& spec = {}, const Var& bias = Var());

Var gelu(const Var& x);
Var softmax(const Var& x, bool causal = false, int64_t offset = 0);
Var layernorm(const Var& x, const Var& gamma, const Var& beta, float eps = 1e-5f);

/// table[ids]; the table's gradient is scatter_add_rows(ids, dy, V).
Var embedding(const Tensor& ids, const Var& table);
/// One part (0 q, 1 k, 2 v) of qkv [B, T, 3C] as [B*n_head, T, hd]. Its backward scatters
/// into a full dqkv with zeros elsewhere: prefer split_qkv when all three parts are used.
Var split_heads(const Var& qkv, int64_t n_head, int part);
/// {q, k, v} of qkv at once; the backward is one unsplit_head(dq, dk, dv).
std::array<Var, 3> split_qkv(const Var& qkv, int64_t n_head);
Var merge_heads(const Var& x, int64_t n_head);

/// Inverted dropout (ops.h's: index0 places x in a larger batch's mask); the backward is
/// dropout of dy with the same p, seed and index0. p = 0 returns x itself (nothing recorded).
Var dropout(const Var& x, float p, uint64_t seed, uint64_t index0 = 0);
Var scale(const Var& x, float s);
/// A view of x with another shape of the same numel; the gradient is reshaped back.
Var reshape(const Var& x, const Shape& shape);

// ----------------------------------------------------------------------------------------
// Fused functions: the fused ops of ops.h (and attention) made differentiable. Each records
// as one op under ops.h's name (Tape::recorded_ops), so that a model written once fuses its
// training forward the way its inference does; the forward keeps what the backward needs
// (the layernorm's output, the GELU's input, the attention probabilities with dropout) by
// running the parts, whose rules are the backward. Dropout (p > 0, `seed` and `index0` as
// ag::dropout's, index0 in the dropped tensor's index space) sits where HF's GPT-2 has it.
// ----------------------------------------------------------------------------------------

/// matmul(layernorm(x, gamma, beta, eps), w, spec, bias); spec.gelu applies GELU after.
Var layernorm_matmul(const Var& x, const Var& gamma, const Var& beta, float eps, const Var& w,
                     const MatmulSpec& spec = {}, const Var& bias = Var());

/// The seam between two sublayers, as ops.h's matmul_add_layernorm_matmul:
///   x_new = x + dropout(a @ w1 + b1, p, seed);  out = layernorm_matmul(x_new, gamma, beta,
///   eps, w2, spec2, b2). Returns {x_new, out}.
std::array<Var, 2> matmul_add_layernorm_matmul(const Var& x, const Var& a, const Var& w1,
                                               const Var& b1, const Var& gamma, const Var& beta,
                                               float eps, const Var& w2, const MatmulSpec& spec2,
                                               const Var& b2, float p = 0.0f, uint64_t seed = 0,
                                               uint64_t index0 = 0);

/// x + dropout(a @ w + bias, p, seed): ops.h's matmul_add_, out of place (a residual update).
Var matmul_add(const Var& x, const Var& a, const Var& w, const Var& bias, float p = 0.0f,
               uint64_t seed = 0, uint64_t index0 = 0);

/// Causal self-attention of qkv [B, T, 3C] with n_head heads, as ops.h's attention without
/// caches: merge_heads(dropout(softmax(q k^T / sqrt(hd)), p, seed) v) -> [B, T, C]. With
/// p = 0 it is ops.h's attention, whose backward is attention_bwd: no [T, T] probabilities
/// are kept for the backward. With p > 0 the parts run (and keep them) for the mask, whose
/// index0 is in the probabilities' [B*n_head, T, T] index space.
Var attention(const Var& qkv, int64_t n_head, float p = 0.0f, uint64_t seed = 0,
              uint64_t index0 = 0);

/// The mean cross-entropy of the LM head, cross_entropy(matmul(h, head, {.trans_b = true}),
/// targets), computed in blocks of block_rows rows so that no logits buffer exceeds
/// block_rows x V (memory: GPT-2's logits for 32 x 1024 tokens are 6.6 GB). h: [N, C];
/// head: [V, C]; targets: U32 with N elements. Each block's logits are kept for the
/// backward, which runs ce_bwd and the head's two matmuls per block.
Var lm_head_loss(const Var& h, const Var& head, const Tensor& targets, int64_t block_rows);

/// Mean cross-entropy over rows: mean_i gather_nll(logits, targets)[i], a [1] Var.
/// logits: [..., V] with N >= 1 rows; targets: U32 with N elements. The backward is
/// ce_bwd(logits, targets, dloss / N) (dloss is read back to the host: one sync).
Var cross_entropy(const Var& logits, const Tensor& targets);

// ----------------------------------------------------------------------------------------
// Training utilities over parameters (parameters without a gradient are skipped).
// ----------------------------------------------------------------------------------------

/// sqrt(sum over params of sumsq(grad)), accumulated in double on the host.
double global_grad_norm(const std::vector<Parameter>& params);

/// Scales every gradient by max_norm / (norm + 1e-6) when the global norm exceeds max_norm
/// (torch.nn.utils.clip_grad_norm_). Returns the norm before clipping. A non-finite norm
/// leaves the gradients untouched (the caller should skip the step). Error(Range) unless
/// max_norm is finite and > 0.
double clip_grad_norm(const std::vector<Parameter>& params, double max_norm);

/// zero_grad() on every parameter.
void zero_grad(const std::vector<Parameter>& params);

}  // namespace forge::ag
