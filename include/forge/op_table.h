// The op table (forge/op_table.def) as data: what each op takes and returns, which public
// functions run it, and the key its kernels are looked up by (its inputs' dtypes).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "forge/dtype.h"

namespace forge {

enum class Op : uint8_t {
#define FORGE_OP(id, ...) id,
#include "forge/op_table.def"
#undef FORGE_OP
};

inline constexpr int kOpCount = 0
#define FORGE_OP(id, ...) +1
#include "forge/op_table.def"
#undef FORGE_OP
    ;

enum class OpKind : uint8_t { forward, training, fused };

struct Operand {
  std::string name;
  DType dtype = DType::F32;     // the table's dtype: every backend has kernels for it
  std::vector<DType> accepted;  // what validation lets through ("b:f32|f16"), dtype first
  bool optional = false;        // may be an undefined tensor
  bool read = true;             // inputs, and outputs marked "+" (updated in place)
};

struct OpInfo {
  Op op;
  std::string name;  // "matmul"
  OpKind kind;
  std::vector<Operand> inputs, outputs;
  std::vector<std::string> attributes;  // OpAttrs fields read
  std::vector<std::string> functions;   // forge/ops.h functions that run it
};

/// Every op, in table order.
const std::vector<OpInfo>& op_table();
const OpInfo& op_info(Op op);
/// The ops a fused op's composition (src/ops/compose.cpp) runs; empty for other ops.
std::vector<Op> composition_parts(Op op);
/// The op named `name` (an id, not a function name); Error(Format) listing the ops if none.
Op op_named(std::string_view name);
/// The op that the public function `function` runs ("add_" -> add); Error(Format) if none.
Op op_of_function(std::string_view function);
/// Every public op function of the table, in table order.
std::vector<std::string> op_functions();

/// Error(DType) "<function>: <operand> must be f32 or f16, got bf16 [2, 3]" unless the
/// dtype is one the table accepts for input `index` of `op`.
void check_input_dtype(Op op, size_t index, const char* function, DType dtype,
                       const std::string& shape);

/// A kernel's key: the dtypes of an op's inputs, in table order, 4 bits each.
using DTypeKey = uint32_t;
constexpr size_t kMaxOpInputs = 8;
constexpr size_t kMaxOpOutputs = 4;
DTypeKey dtype_key(std::initializer_list<DType> dtypes);
/// The key of the table's own dtypes for `op` (what every backend registers).
DTypeKey table_key(Op op);
/// "(f32, f16, f32)" for messages.
std::string key_str(Op op, DTypeKey key);

}  // namespace forge
