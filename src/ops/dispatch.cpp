#include "ops/dispatch.h"

#include <chrono>

#include "forge/error.h"
#include "forge/op_trace.h"

namespace forge {
namespace {
thread_local OpTrace* active_trace = nullptr;
thread_local int call_depth = 0;  // run() calls in progress on this thread
}  // namespace

struct OpTraceAccess {
  static void note(const char* function) {
    if (active_trace && call_depth == 0) active_trace->ops_.emplace_back(function);
  }
};

OpTrace::OpTrace() : outer_(active_trace) { active_trace = this; }
OpTrace::~OpTrace() { active_trace = outer_; }

}  // namespace forge

namespace forge::ops_detail {
namespace {

/// Counts the run() calls in progress (a composition's parts run inside its call).
struct CallDepth {
  CallDepth() { ++call_depth; }
  ~CallDepth() { --call_depth; }
  CallDepth(const CallDepth&) = delete;
  CallDepth& operator=(const CallDepth&) = delete;
};

DTypeKey key_of(const OpCall& c) {
  const OpInfo& info = op_info(c.op);
  DTypeKey k = 0;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    const Tensor* t = c.inputs[i];
    const DType d = t && t->defined() ? t->dtype() : info.inputs[i].dtype;
    k |= static_cast<DTypeKey>(static_cast<uint32_t>(d) + 1) << (4 * i);
  }
  return k;
}

void compose(Backend& be, const OpCall& c) {
  switch (c.op) {
    case Op::layernorm_matmul: return compose_layernorm_matmul(be, c);
    case Op::matmul_add_layernorm_matmul: return compose_matmul_add_layernorm_matmul(be, c);
    case Op::softmax_xent: return compose_softmax_xent(be, c);
    case Op::attention_bwd: return compose_attention_bwd(be, c);
    default: break;
  }
  throw Error(ErrorKind::Backend, op_info(c.op).name + ": a fused op without a composition");
}

}  // namespace

void run(Backend& be, const OpCall& call) {
  OpTraceAccess::note(call.function);
  const CallDepth depth;
  const DTypeKey key = key_of(call);
  const KernelEntry* k = be.find_kernel(call.op, key);
  if (k && (!k->accepts || k->accepts(be, call))) {
    if (!be.host_timing()) return k->run(be, call);
    const auto t0 = std::chrono::steady_clock::now();
    k->run(be, call);
    be.add_host_time(
        call.op,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return;
  }
  // A fused op runs as its parts, whatever its dtypes: each part is looked up by its own.
  if (op_info(call.op).kind == OpKind::fused) return compose(be, call);
  throw Error(ErrorKind::Unsupported, op_info(call.op).name + ": device " + be.info().device.str() +
                                          " has no kernel for " + key_str(call.op, key));
}

void run(Backend& be, const char* function, Op op, std::initializer_list<const Tensor*> inputs,
         std::initializer_list<Tensor*> outputs, const OpAttrs& attrs) {
  OpCall c{op, {}, {}, attrs, function};
  size_t i = 0;
  for (const Tensor* t : inputs) c.inputs[i++] = t;
  i = 0;
  for (Tensor* t : outputs) c.outputs[i++] = t;
  run(be, c);
}

}  // namespace forge::ops_detail
