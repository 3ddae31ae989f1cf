// Autograd internals shared by tape.cpp (the engine) and functions.cpp (the rules).
//
// Ownership (no cycles): a Var owns its Node; a TapeState owns its Records; a Record owns
// its input and output Nodes and a backward closure holding the tensors it saved. A Node
// refers to its tape only weakly, so a destroyed tape is detected instead of dangling.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/error.h"
#include "forge/tensor.h"

namespace forge::ag::detail {

struct ParamState {
  Tensor value;
  Tensor grad;            // the gradient buffer; meaningful only when has_grad
  bool has_grad = false;  // false after zero_grad(): grad's buffer is reused, not read
  bool requires_grad = true;
  std::string name;
};

struct Node {
  Tensor value;
  Tensor grad;
  // false: `grad` may share storage with another node's gradient or a seed (the same dy
  // flows to both inputs of an add), so a second contribution must be added out of place.
  bool grad_owned = false;
  // The gradient's one value when the host knows it (a seed given as a number), so that a
  // rule needs no device read for it (BackwardCtx::dy_value).
  std::optional<float> grad_host;
  bool requires_grad = false;
  bool is_leaf = false;
  bool retain = false;
  std::shared_ptr<ParamState> param;  // set for tape.param() leaves: gradients go there
  std::weak_ptr<TapeState> tape;
};

/// What a backward rule sees: the gradients of the record's outputs, and where to send the
/// gradients of its inputs.
class BackwardCtx {
 public:
  BackwardCtx(const char* op, std::vector<std::shared_ptr<Node>>& inputs,
              std::vector<std::shared_ptr<Node>>& outputs)
      : op_(op), inputs_(inputs), outputs_(outputs) {}
  /// Gradient of output i; undefined when nothing flowed into it.
  const Tensor& dy(size_t i = 0) const { return outputs_[i]->grad; }
  /// The one value of output i's gradient (a loss's): known on the host for a seed given as
  /// a number, else read from the device (read_async). Error(Shape) unless it has one value.
  float dy_value(size_t i = 0) const;
  /// Gradient of output i, or zeros of its shape when nothing flowed into it.
  Tensor dy_or_zeros(size_t i) const;
  /// Whether input i wants a gradient (rules skip the work otherwise).
  bool needs(size_t i) const { return inputs_[i]->requires_grad; }
  /// Accumulates g into input i's gradient (g must have the input's shape).
  void give(size_t i, Tensor g);
  /// Input i's gradient buffer when it already holds a gradient that this rule may add to
  /// in place (a parameter's accumulated gradient, or an owned intermediate one); nullptr
  /// otherwise (then use give). Lets sparse rules (the embedding's) touch only their rows.
  Tensor* grad_buffer(size_t i);

 private:
  const char* op_;
  std::vector<std::shared_ptr<Node>>& inputs_;
  std::vector<std::shared_ptr<Node>>& outputs_;
};

struct Record {
  const char* op = "";
  // The fused function (ag::layernorm_matmul, ...) this record is a part of, and which call
  // of it: Tape::recorded_ops names that call once.
  const char* fused = nullptr;
  uint64_t fused_call = 0;
  std::vector<std::shared_ptr<Node>> inputs;
  std::vector<std::shared_ptr<Node>> outputs;
  std::function<void(BackwardCtx&)> backward;
};

struct TapeState {
  std::vector<Record> records;
  bool backward_done = false;
  // The fused function being recorded (outermost), its call number, and the calls so far.
  const char* fused = nullptr;
  uint64_t fused_call = 0, fused_calls = 0;
};

/// While alive, records made on `tape` are parts of one call of the fused function `name`
/// (nested fused functions count as parts of the outermost).
class FusedScope {
 public:
  FusedScope(const std::shared_ptr<TapeState>& tape, const char* name);
  ~FusedScope();
  FusedScope(const FusedScope&) = delete;
  FusedScope& operator=(const FusedScope&) = delete;

 private:
  std::shared_ptr<TapeState> tape_;  // null when an outer scope is open
};

/// Accumulates g into a node's gradient (or its parameter's). `op` names the caller for
/// error messages.
void accumulate(const char* op, Node& node, Tensor g);

/// Causal self-attention of qkv [B, T, 3C] without dropout as one record: ops.h's attention
/// forward (no [T, T] matrix kept), attention_bwd its backward (functions.cpp).
Var attention_no_dropout(const Var& qkv, int64_t n_head);

/// Reaches the private handles of the public classes.
struct Access {
  static const std::shared_ptr<Node>& node(const Var& v) { return v.node_; }
  static Var make_var(std::shared_ptr<Node> n) {
    Var v;
    v.node_ = std::move(n);
    return v;
  }
  static const std::shared_ptr<ParamState>& state(const Parameter& p) { return p.state_; }
  static Parameter make_param(std::shared_ptr<ParamState> s) {
    Parameter p;
    p.state_ = std::move(s);
    return p;
  }
  static const std::shared_ptr<TapeState>& state(const Tape& t) { return t.state_; }
};

[[noreturn]] inline void fail(ErrorKind kind, const char* op, const std::string& what) {
  throw Error(kind, std::string(op) + ": " + what);
}

}  // namespace forge::ag::detail
