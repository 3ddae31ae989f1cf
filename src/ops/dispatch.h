// How an op function reaches its kernel: the backend's kernel for the op and its inputs'
// dtypes, or, for a fused op the backend lacks (or whose kernel declines the shapes), the
// composition of its parts (compose.cpp), each again looked up in the table. A composition
// runs between kernel calls, never inside one: no backend re-enters itself.
#pragma once

#include <initializer_list>

#include "forge/backend.h"

namespace forge::ops_detail {

/// Runs `op` on `be` for the public function `function` (the name errors start with).
/// Error(Unsupported) "<function>: device D has no kernel for <op> (dtypes)[: why]".
void run(Backend& be, const char* function, Op op, std::initializer_list<const Tensor*> inputs,
         std::initializer_list<Tensor*> outputs, const OpAttrs& attrs = {});
void run(Backend& be, const OpCall& call);

/// The generic compositions of the fused ops (compose.cpp).
void compose_layernorm_matmul(Backend& be, const OpCall& call);
void compose_matmul_add_layernorm_matmul(Backend& be, const OpCall& call);
void compose_softmax_xent(Backend& be, const OpCall& call);
void compose_attention_bwd(Backend& be, const OpCall& call);

}  // namespace forge::ops_detail
