// forge/op_table.def parsed once into OpInfo records.
#include "forge/op_table.h"

#include <sstream>

#include "forge/error.h"

namespace forge {
namespace {

DType parse_dtype(const std::string& s, const char* op) {
  for (DType d : kAllDTypes)
    if (s == dtype_name(d)) return d;
  throw Error(ErrorKind::Format, std::string("op table: ") + op + ": unknown dtype " + s);
}

std::vector<Operand> parse_operands(const char* text, bool outputs, const char* op) {
  std::vector<Operand> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    Operand o;
    o.read = !outputs;
    if (word[0] == '+') {
      o.read = true;
      word.erase(0, 1);
    }
    if (word.back() == '?') {
      o.optional = true;
      word.pop_back();
    }
    const auto colon = word.find(':');
    if (colon == std::string::npos)
      throw Error(ErrorKind::Format,
                  std::string("op table: ") + op + ": '" + word + "' has no dtype");
    o.name = word.substr(0, colon);
    std::string types = word.substr(colon + 1);
    for (size_t bar; (bar = types.find('|')) != std::string::npos; types.erase(0, bar + 1))
      o.accepted.push_back(parse_dtype(types.substr(0, bar), op));
    o.accepted.push_back(parse_dtype(types, op));
    o.dtype = o.accepted.front();
    out.push_back(o);
  }
  return out;
}

std::vector<std::string> words(const char* text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::vector<OpInfo> build() {
  std::vector<OpInfo> t;
#define FORGE_OP(id, kind, ins, outs, attrs, fns)                                       \
  t.push_back({Op::id, #id, OpKind::kind, parse_operands(ins, false, #id),              \
               parse_operands(outs, true, #id), words(attrs), words(fns)});             \
  if (t.back().inputs.size() > kMaxOpInputs || t.back().outputs.size() > kMaxOpOutputs) \
    throw Error(ErrorKind::Format, "op table: " #id " has too many operands");
#include "forge/op_table.def"
#undef FORGE_OP
  return t;
}

std::string op_list() {
  std::string s;
  for (const OpInfo& i : op_table()) s += (s.empty() ? "" : ", ") + i.name;
  return s;
}

}  // namespace

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = build();
  return table;
}

const OpInfo& op_info(Op op) { return op_table()[static_cast<size_t>(op)]; }

Op op_named(std::string_view name) {
  for (const OpInfo& i : op_table())
    if (i.name == name) return i.op;
  throw Error(ErrorKind::Format,
              "no op named '" + std::string(name) + "' (ops: " + op_list() + ")");
}

Op op_of_function(std::string_view function) {
  for (const OpInfo& i : op_table())
    for (const std::string& f : i.functions)
      if (f == function) return i.op;
  throw Error(ErrorKind::Format, "no op function named '" + std::string(function) + "'");
}

std::vector<std::string> op_functions() {
  std::vector<std::string> out;
  for (const OpInfo& i : op_table()) out.insert(out.end(), i.functions.begin(), i.functions.end());
  return out;
}

void check_input_dtype(Op op, size_t index, const char* function, DType dtype,
                       const std::string& shape) {
  const Operand& o = op_info(op).inputs.at(index);
  std::string names;
  for (DType d : o.accepted) {
    if (d == dtype) return;
    names += std::string(names.empty() ? "" : " or ") + dtype_name(d);
  }
  throw Error(ErrorKind::DType, std::string(function) + ": " + o.name + " must be " + names +
                                    ", got " + dtype_name(dtype) + " " + shape);
}

DTypeKey dtype_key(std::initializer_list<DType> dtypes) {
  DTypeKey k = 0;
  int shift = 0;
  for (DType d : dtypes) {
    k |= static_cast<DTypeKey>(static_cast<uint32_t>(d) + 1) << shift;
    shift += 4;
  }
  return k;
}

DTypeKey table_key(Op op) {
  DTypeKey k = 0;
  int shift = 0;
  for (const Operand& o : op_info(op).inputs) {
    k |= static_cast<DTypeKey>(static_cast<uint32_t>(o.dtype) + 1) << shift;
    shift += 4;
  }
  return k;
}

std::string key_str(Op op, DTypeKey key) {
  std::string s = "(";
  for (size_t i = 0; i < op_info(op).inputs.size(); ++i) {
    const uint32_t d = (key >> (4 * i)) & 15u;
    if (i) s += ", ";
    s += d ? dtype_name(static_cast<DType>(d - 1)) : "?";
  }
  return s + ")";
}

}  // namespace forge
