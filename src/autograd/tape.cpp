// The autograd engine: Parameter and Var handles, the Tape, gradient accumulation and the
// reverse walk.
#include <string_view>
#include <unordered_map>
#include <utility>

#include "autograd/node.h"
#include "forge/device_queue.h"
#include "forge/ops.h"

namespace forge::ag {
using detail::fail;
using detail::Node;
using detail::ParamState;
using detail::Record;
using detail::TapeState;

// ---- Parameter ---------------------------------------------------------------------------

Parameter::Parameter(Tensor value, std::string name, bool requires_grad) {
  const char* op = "Parameter";
  if (!value.defined()) fail(ErrorKind::Shape, op, "undefined tensor for '" + name + "'");
  if (value.dtype() != DType::F32)
    fail(ErrorKind::DType, op, "'" + name + "' must be f32, got " + value.str());
  state_ = std::make_shared<ParamState>();
  state_->value = std::move(value);
  state_->name = std::move(name);
  state_->requires_grad = requires_grad;
}

namespace {
const ParamState& checked(const std::shared_ptr<ParamState>& s, const char* what) {
  if (!s) fail(ErrorKind::Shape, what, "empty Parameter handle");
  return *s;
}
}  // namespace

const std::string& Parameter::name() const { return checked(state_, "Parameter::name").name; }
Tensor& Parameter::value() const {
  checked(state_, "Parameter::value");
  return state_->value;
}
const Tensor& Parameter::grad() const {
  static const Tensor kNone;
  const ParamState& s = checked(state_, "Parameter::grad");
  return s.has_grad ? s.grad : kNone;
}
bool Parameter::has_grad() const { return checked(state_, "Parameter::has_grad").has_grad; }
void Parameter::zero_grad() const {
  checked(state_, "Parameter::zero_grad");
  state_->has_grad = false;
}
bool Parameter::requires_grad() const {
  return checked(state_, "Parameter::requires_grad").requires_grad;
}
void Parameter::set_requires_grad(bool requires_grad) const {
  checked(state_, "Parameter::set_requires_grad");
  state_->requires_grad = requires_grad;
}

// ---- Var ---------------------------------------------------------------------------------

const Tensor& Var::value() const {
  if (!node_) fail(ErrorKind::Shape, "Var::value", "undefined Var");
  return node_->value;
}

float Var::item() const {
  const Tensor& v = value();
  if (v.numel() != 1)
    fail(ErrorKind::Shape, "Var::item", "value " + v.shape().str() + " has numel != 1");
  if (v.dtype() != DType::F32) fail(ErrorKind::DType, "Var::item", "value is not f32: " + v.str());
  return v.to_vector<float>()[0];
}

const Tensor& Var::grad() const {
  static const Tensor kNone;
  if (!node_) fail(ErrorKind::Shape, "Var::grad", "undefined Var");
  if (node_->param) return node_->param->has_grad ? node_->param->grad : kNone;
  return node_->grad;
}

bool Var::requires_grad() const {
  if (!node_) fail(ErrorKind::Shape, "Var::requires_grad", "undefined Var");
  return node_->requires_grad;
}

void Var::retain_grad() {
  if (!node_) fail(ErrorKind::Shape, "Var::retain_grad", "undefined Var");
  node_->retain = true;
}

// ---- accumulation ------------------------------------------------------------------------

namespace detail {

void accumulate(const char* op, Node& node, Tensor g) {
  if (!g.defined() || g.dtype() != DType::F32 || g.shape() != node.value.shape())
    fail(ErrorKind::Shape, op,
         "backward produced gradient " + g.str() + " for a value " + node.value.str());
  if (node.param) {
    ParamState& p = *node.param;
    if (p.has_grad) {
      add_(p.grad, g);
    } else if (p.grad.defined() && p.grad.shape() == g.shape() && p.grad.device() == g.device()) {
      p.grad.copy_from(g);  // reuse the buffer zero_grad() kept
    } else {
      p.grad = g.clone();  // own it: g may be shared with other nodes' gradients
    }
    p.has_grad = true;
    return;
  }
  if (!node.grad.defined()) {
    if (node.is_leaf) {
      // A leaf keeps its gradient after backward, where the user may modify it in place:
      // it must not share storage with anything (add's dy goes to both inputs).
      node.grad = g.clone();
      node.grad_owned = true;
    } else {
      node.grad = std::move(g);
      node.grad_owned = false;
    }
  } else if (node.grad_owned) {
    add_(node.grad, g);
  } else {
    node.grad = add(node.grad, g);
    node.grad_owned = true;
  }
}

Tensor BackwardCtx::dy_or_zeros(size_t i) const {
  const Node& n = *outputs_[i];
  if (n.grad.defined()) return n.grad;
  return Tensor::zeros(n.value.shape(), DType::F32, n.value.device());
}

float BackwardCtx::dy_value(size_t i) const {
  const Node& n = *outputs_[i];
  if (n.grad_host) return *n.grad_host;
  if (!n.grad.defined() || n.grad.numel() != 1)
    fail(ErrorKind::Shape, op_, "the gradient of a one-value output has not one value");
  return read_async(n.grad).get<float>()[0];
}

Tensor* BackwardCtx::grad_buffer(size_t i) {
  Node& n = *inputs_[i];
  if (!n.requires_grad) return nullptr;
  if (n.param) return n.param->has_grad ? &n.param->grad : nullptr;
  return n.grad.defined() && n.grad_owned ? &n.grad : nullptr;
}

void BackwardCtx::give(size_t i, Tensor g) {
  if (!inputs_[i]->requires_grad) return;
  accumulate(op_, *inputs_[i], std::move(g));
}

}  // namespace detail

// ---- Tape --------------------------------------------------------------------------------

namespace {
TapeState& live(const std::shared_ptr<TapeState>& s, const char* op) {
  if (!s) fail(ErrorKind::Shape, op, "moved-from Tape");
  if (s->backward_done)
    fail(ErrorKind::Shape, op, "this tape already ran backward; record on a new Tape");
  return *s;
}
}  // namespace

Tape::Tape() : state_(std::make_shared<TapeState>()) {}
Tape::~Tape() = default;
Tape::Tape(Tape&&) noexcept = default;
Tape& Tape::operator=(Tape&&) noexcept = default;

Var Tape::leaf(const Tensor& value, bool requires_grad) {
  const char* op = "Tape::leaf";
  live(state_, op);
  if (!value.defined()) fail(ErrorKind::Shape, op, "undefined tensor");
  if (requires_grad && value.dtype() != DType::F32)
    fail(ErrorKind::DType, op, "only f32 values can require grad, got " + value.str());
  auto n = std::make_shared<Node>();
  n->value = value;
  n->requires_grad = requires_grad;
  n->is_leaf = true;
  n->tape = state_;
  return detail::Access::make_var(std::move(n));
}

Var Tape::param(const Parameter& p) {
  const char* op = "Tape::param";
  live(state_, op);
  const auto& ps = detail::Access::state(p);
  if (!ps) fail(ErrorKind::Shape, op, "empty Parameter handle");
  auto n = std::make_shared<Node>();
  n->value = ps->value;
  n->requires_grad = ps->requires_grad;
  n->is_leaf = true;
  n->param = ps;
  n->tape = state_;
  return detail::Access::make_var(std::move(n));
}

void Tape::backward(const Var& loss) {
  const char* op = "Tape::backward";
  const auto& n = detail::Access::node(loss);
  if (!n) fail(ErrorKind::Shape, op, "undefined loss Var");
  if (n->value.numel() != 1)
    fail(ErrorKind::Shape, op,
         "loss " + n->value.shape().str() +
             " is not a scalar (numel != 1); pass a seed gradient of its shape");
  backward(loss, 1.0f);
}

void Tape::backward(const Var& root, float seed) { backward(root, seed, GradReady()); }

void Tape::backward(const Var& root, float seed, const GradReady& ready) {
  const char* op = "Tape::backward";
  const auto& n = detail::Access::node(root);
  if (!n) fail(ErrorKind::Shape, op, "undefined root Var");
  if (n->value.numel() != 1)
    fail(ErrorKind::Shape, op,
         "root " + n->value.shape().str() +
             " is not a scalar (numel != 1); pass a seed gradient of its shape");
  backward(root, Tensor::full(n->value.shape(), seed, n->value.device()), &seed,
           ready ? &ready : nullptr);
}

void Tape::backward(const Var& root, const Tensor& seed) { backward(root, seed, nullptr); }

void Tape::backward(const Var& root, const Tensor& seed, const float* host_seed,
                    const GradReady* ready) {
  const char* op = "Tape::backward";
  TapeState& st = live(state_, op);
  const auto& n = detail::Access::node(root);
  if (!n) fail(ErrorKind::Shape, op, "undefined root Var");
  if (n->tape.lock() != state_) fail(ErrorKind::Shape, op, "the root Var belongs to another tape");
  if (!n->requires_grad)
    fail(ErrorKind::Shape, op, "the root Var does not depend on any Var that requires grad");
  if (!seed.defined() || seed.dtype() != DType::F32 || seed.shape() != n->value.shape())
    fail(ErrorKind::Shape, op,
         "seed gradient " + seed.str() + " does not match the root " + n->value.str());
  if (seed.device() != n->value.device())
    fail(ErrorKind::Device, op,
         "seed on " + seed.device().str() + ", root on " + n->value.device().str());

  // With `ready`: each parameter's earliest reading record, where its gradient is complete.
  std::unordered_map<const detail::ParamState*, size_t> first_use;
  if (ready != nullptr)
    for (size_t i = st.records.size(); i-- > 0;)
      for (const auto& in : st.records[i].inputs)
        if (in->param && in->requires_grad) first_use[in->param.get()] = i;

  // Marked first: a failing rule must not leave a tape that can be walked again half-spent.
  st.backward_done = true;
  try {
    detail::accumulate(op, *n, seed);
    if (host_seed) n->grad_host = *host_seed;
    // Reverse recording order is a topological order: a record's outputs are only used by
    // records made after it, so their gradients are complete when the walk reaches it.
    while (!st.records.empty()) {
      Record rec = std::move(st.records.back());
      st.records.pop_back();
      bool any = false;
      for (const auto& o : rec.outputs) any = any || o->grad.defined();
      if (any) {
        detail::BackwardCtx ctx(rec.op, rec.inputs, rec.outputs);
        rec.backward(ctx);
      }
      if (ready != nullptr) {
        const size_t index = st.records.size();  // rec's index before the pop
        for (const auto& in : rec.inputs) {
          if (!in->param) continue;
          const auto it = first_use.find(in->param.get());
          if (it == first_use.end() || it->second != index) continue;
          first_use.erase(it);  // once, though rec may read it twice
          (*ready)(detail::Access::make_param(in->param));
        }
      }
      for (const auto& o : rec.outputs) {
        if (!o->retain) {
          o->grad = Tensor();  // consumed: free it now
        } else if (o->grad.defined() && !o->grad_owned) {
          o->grad = o->grad.clone();  // kept: must not alias a tensor another node keeps
          o->grad_owned = true;
        }
      }
      // rec goes out of scope here, releasing its saved tensors.
    }
  } catch (...) {
    st.records.clear();
    throw;
  }
}

size_t Tape::num_records() const { return state_ ? state_->records.size() : 0; }

std::vector<std::string> Tape::recorded_ops() const {
  std::vector<std::string> out;
  if (!state_) return out;
  const Record* last = nullptr;
  for (const Record& r : state_->records) {
    if (r.fused) {
      if (!last || last->fused != r.fused || last->fused_call != r.fused_call)
        out.emplace_back(r.fused);
    } else if (std::string_view(r.op) != "ag::reshape") {
      std::string_view name(r.op);
      if (name.substr(0, 4) == "ag::") name.remove_prefix(4);
      out.emplace_back(name);
    }
    last = &r;
  }
  return out;
}

namespace detail {

FusedScope::FusedScope(const std::shared_ptr<TapeState>& tape, const char* name) {
  if (!tape || tape->fused) return;
  tape_ = tape;
  tape_->fused = name;
  tape_->fused_call = ++tape_->fused_calls;
}

FusedScope::~FusedScope() {
  if (tape_) tape_->fused = nullptr;
}

}  // namespace detail
bool Tape::backward_done() const { return state_ && state_->backward_done; }

}  // namespace forge::ag
