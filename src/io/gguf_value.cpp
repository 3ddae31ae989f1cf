// GGUF metadata values (forge/gguf.h: Value, its typed accessors and factories), ggml's type
// numbers, and the typed conversions the reader's lookups share (io/gguf_format.h).
#include <cstring>
#include <limits>
#include "core/bit_cast.h"

#include "forge/error.h"
#include "forge/gguf.h"
#include "io/gguf_format.h"

namespace forge::gguf {

using format::Access;

// ---- values -----------------------------------------------------------------------------------

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown";
}

namespace format {

bool integer_type(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64: return true;
    default: return false;
  }
}

bool signed_type(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}

// Sign-extends the low `bytes` bytes of bits.
int64_t sign_extend(uint64_t bits, size_t bytes) {
  if (bytes == 8) return static_cast<int64_t>(bits);
  const unsigned shift = 64 - 8 * static_cast<unsigned>(bytes);
  return static_cast<int64_t>(bits << shift) >> shift;
}

// An integer scalar, widened: either a non-negative value (as u64) or a negative one.
struct Wide {
  bool negative;
  uint64_t u;  // the value when !negative
  int64_t i;   // the value when negative
};

Wide widen(ValueType t, uint64_t bits) {
  if (signed_type(t)) {
    const int64_t v = sign_extend(bits, format::scalar_bytes(t));
    if (v < 0) return {true, 0, v};
    return {false, static_cast<uint64_t>(v), v};
  }
  return {false, bits, 0};
}

std::string wide_str(const Wide& w) {
  return w.negative ? std::to_string(w.i) : std::to_string(w.u);
}

[[noreturn]] void fail(const std::string& ctx, const std::string& what) {
  throw Error(ErrorKind::Format, ctx + ": " + what);
}

std::string type_desc(const Value& v) {
  if (!v.is_array()) return value_type_name(v.type());
  return std::string("array of ") + value_type_name(v.element_type());
}

[[noreturn]] void wrong_type(const Value& v, const std::string& ctx, const char* expected) {
  throw Error(ErrorKind::Format, ctx + " is " + type_desc(v) + ", expected " + expected);
}

// The conversions behind Value's accessors and File's typed lookups; ctx starts messages.
uint64_t to_u64(const Value& v, const std::string& ctx, uint64_t max, const char* expected) {
  if (!v.is_integer()) wrong_type(v, ctx, expected);
  const Wide w = widen(v.type(), Access::bits(v));
  if (w.negative || w.u > max)
    fail(ctx,
         std::string(value_type_name(v.type())) + " " + wide_str(w) + " does not fit " + expected);
  return w.u;
}

int64_t to_i64(const Value& v, const std::string& ctx, int64_t lo, int64_t hi,
               const char* expected) {
  if (!v.is_integer()) wrong_type(v, ctx, expected);
  const Wide w = widen(v.type(), Access::bits(v));
  const bool fits = w.negative ? w.i >= lo : w.u <= static_cast<uint64_t>(hi);
  if (!fits)
    fail(ctx,
         std::string(value_type_name(v.type())) + " " + wide_str(w) + " does not fit " + expected);
  return w.negative ? w.i : static_cast<int64_t>(w.u);
}

double to_f64(const Value& v, const std::string& ctx) {
  const uint64_t bits = Access::bits(v);
  if (v.type() == ValueType::F64) return forge::bit_cast<double>(bits);
  if (v.type() == ValueType::F32) return forge::bit_cast<float>(static_cast<uint32_t>(bits));
  if (!v.is_integer()) wrong_type(v, ctx, "a number");
  const Wide w = widen(v.type(), bits);
  return w.negative ? static_cast<double>(w.i) : static_cast<double>(w.u);
}

float to_f32(const Value& v, const std::string& ctx) {
  if (v.type() == ValueType::F32)
    return forge::bit_cast<float>(static_cast<uint32_t>(Access::bits(v)));
  if (v.type() == ValueType::F64) return static_cast<float>(to_f64(v, ctx));
  if (!v.is_integer()) wrong_type(v, ctx, "a number");
  const Wide w = widen(v.type(), Access::bits(v));
  return w.negative ? static_cast<float>(w.i) : static_cast<float>(w.u);
}

bool to_bool(const Value& v, const std::string& ctx) {
  if (v.type() != ValueType::Bool) wrong_type(v, ctx, "bool");
  return Access::bits(v) != 0;
}

const std::vector<std::string>& to_strings(const Value& v, const std::string& ctx) {
  if (!v.is_array() || v.element_type() != ValueType::String) wrong_type(v, ctx, "array of string");
  return v.as_strings();
}

void require_array(const Value& v, const std::string& ctx) {
  if (!v.is_array()) wrong_type(v, ctx, "an array");
}

// Element i of a numeric or bool array as a scalar Value.
Value element(const Value& v, size_t i) {
  const size_t n = format::scalar_bytes(v.element_type());
  uint64_t bits = 0;
  std::memcpy(&bits, v.raw_elements().data() + i * n, n);
  return Access::scalar(v.element_type(), bits);
}

std::vector<int64_t> to_i64s(const Value& v, const std::string& ctx) {
  require_array(v, ctx);
  if (!integer_type(v.element_type())) wrong_type(v, ctx, "an integer array");
  std::vector<int64_t> out(v.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] =
        to_i64(element(v, i), ctx + " element " + std::to_string(i),
               std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), "i64");
  return out;
}

std::vector<double> to_f64s(const Value& v, const std::string& ctx) {
  require_array(v, ctx);
  const ValueType e = v.element_type();
  if (!integer_type(e) && e != ValueType::F32 && e != ValueType::F64)
    wrong_type(v, ctx, "a numeric array");
  std::vector<double> out(v.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = to_f64(element(v, i), ctx);
  return out;
}

const std::string kValueCtx = "gguf: value";

template <typename T>
Value numeric_array(ValueType elem, const std::vector<T>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  return Access::numeric_array(elem, std::move(bytes));
}

template <typename T>
Value scalar_of(ValueType t, T v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return Access::scalar(t, bits);
}

const std::string& to_text(const Value& v, const std::string& ctx) {
  if (v.type() != ValueType::String) wrong_type(v, ctx, "string");
  return v.as_string();
}

}  // namespace format

using namespace format;

Value Value::u8(uint8_t v) { return scalar_of(ValueType::U8, v); }
Value Value::i8(int8_t v) { return scalar_of(ValueType::I8, v); }
Value Value::u16(uint16_t v) { return scalar_of(ValueType::U16, v); }
Value Value::i16(int16_t v) { return scalar_of(ValueType::I16, v); }
Value Value::u32(uint32_t v) { return scalar_of(ValueType::U32, v); }
Value Value::i32(int32_t v) { return scalar_of(ValueType::I32, v); }
Value Value::f32(float v) { return scalar_of(ValueType::F32, v); }
Value Value::boolean(bool v) { return Access::scalar(ValueType::Bool, v ? 1 : 0); }
Value Value::u64(uint64_t v) { return scalar_of(ValueType::U64, v); }
Value Value::i64(int64_t v) { return scalar_of(ValueType::I64, v); }
Value Value::f64(double v) { return scalar_of(ValueType::F64, v); }
Value Value::string(std::string v) {
  Value out;
  out.type_ = ValueType::String;
  out.str_ = std::move(v);
  return out;
}

Value Value::u8s(const std::vector<uint8_t>& v) { return numeric_array(ValueType::U8, v); }
Value Value::i8s(const std::vector<int8_t>& v) { return numeric_array(ValueType::I8, v); }
Value Value::u16s(const std::vector<uint16_t>& v) { return numeric_array(ValueType::U16, v); }
Value Value::i16s(const std::vector<int16_t>& v) { return numeric_array(ValueType::I16, v); }
Value Value::u32s(const std::vector<uint32_t>& v) { return numeric_array(ValueType::U32, v); }
Value Value::i32s(const std::vector<int32_t>& v) { return numeric_array(ValueType::I32, v); }
Value Value::f32s(const std::vector<float>& v) { return numeric_array(ValueType::F32, v); }
Value Value::u64s(const std::vector<uint64_t>& v) { return numeric_array(ValueType::U64, v); }
Value Value::i64s(const std::vector<int64_t>& v) { return numeric_array(ValueType::I64, v); }
Value Value::f64s(const std::vector<double>& v) { return numeric_array(ValueType::F64, v); }
Value Value::bools(const std::vector<bool>& v) {
  std::vector<uint8_t> bytes(v.size());
  for (size_t i = 0; i < v.size(); ++i) bytes[i] = v[i] ? 1 : 0;
  return Access::numeric_array(ValueType::Bool, std::move(bytes));
}
Value Value::strings(std::vector<std::string> v) {
  Value out;
  out.type_ = ValueType::Array;
  out.elem_ = ValueType::String;
  out.strings_ = std::move(v);
  return out;
}
Value Value::arrays(std::vector<Value> items) {
  Value out;
  out.type_ = ValueType::Array;
  out.elem_ = ValueType::Array;
  for (size_t i = 0; i < items.size(); ++i)
    if (!items[i].is_array())
      fail(kValueCtx,
           "arrays(): item " + std::to_string(i) + " is " + type_desc(items[i]) + ", not an array");
  out.arrays_ = std::move(items);
  if (Access::depth(out) > format::kMaxArrayDepth)
    fail(kValueCtx,
         "arrays(): nested deeper than " + std::to_string(format::kMaxArrayDepth) + " levels");
  return out;
}

bool Value::is_integer() const { return integer_type(type_); }

uint64_t Value::as_u64() const {
  return to_u64(*this, kValueCtx, std::numeric_limits<uint64_t>::max(), "u64");
}
uint32_t Value::as_u32() const {
  return static_cast<uint32_t>(
      to_u64(*this, kValueCtx, std::numeric_limits<uint32_t>::max(), "u32"));
}
int64_t Value::as_i64() const {
  return to_i64(*this, kValueCtx, std::numeric_limits<int64_t>::min(),
                std::numeric_limits<int64_t>::max(), "i64");
}
int32_t Value::as_i32() const {
  return static_cast<int32_t>(to_i64(*this, kValueCtx, std::numeric_limits<int32_t>::min(),
                                     std::numeric_limits<int32_t>::max(), "i32"));
}
double Value::as_f64() const { return to_f64(*this, kValueCtx); }
float Value::as_f32() const { return to_f32(*this, kValueCtx); }
bool Value::as_bool() const { return to_bool(*this, kValueCtx); }
const std::string& Value::as_string() const {
  if (type_ != ValueType::String) wrong_type(*this, kValueCtx, "string");
  return str_;
}

ValueType Value::element_type() const {
  if (type_ != ValueType::Array) wrong_type(*this, kValueCtx, "an array");
  return elem_;
}

size_t Value::size() const {
  if (type_ != ValueType::Array) wrong_type(*this, kValueCtx, "an array");
  if (elem_ == ValueType::String) return strings_.size();
  if (elem_ == ValueType::Array) return arrays_.size();
  return bytes_.size() / format::scalar_bytes(elem_);
}

Value Value::at(size_t i) const {
  const size_t n = size();
  if (i >= n)
    throw Error(ErrorKind::Range, kValueCtx + ": element " + std::to_string(i) +
                                      " of an array of " + std::to_string(n));
  if (elem_ == ValueType::String) return string(strings_[i]);
  if (elem_ == ValueType::Array) return arrays_[i];
  return element(*this, i);
}

const std::vector<std::string>& Value::as_strings() const {
  if (type_ != ValueType::Array || elem_ != ValueType::String)
    wrong_type(*this, kValueCtx, "array of string");
  return strings_;
}

std::vector<uint64_t> Value::as_u64s() const {
  require_array(*this, kValueCtx);
  if (!integer_type(elem_)) wrong_type(*this, kValueCtx, "an integer array");
  std::vector<uint64_t> out(size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = to_u64(element(*this, i), kValueCtx + " element " + std::to_string(i),
                    std::numeric_limits<uint64_t>::max(), "u64");
  return out;
}

std::vector<int64_t> Value::as_i64s() const { return to_i64s(*this, kValueCtx); }
std::vector<double> Value::as_f64s() const { return to_f64s(*this, kValueCtx); }

std::vector<bool> Value::as_bools() const {
  if (type_ != ValueType::Array || elem_ != ValueType::Bool)
    wrong_type(*this, kValueCtx, "array of bool");
  std::vector<bool> out(bytes_.size());
  for (size_t i = 0; i < bytes_.size(); ++i) out[i] = bytes_[i] != 0;
  return out;
}

const std::vector<Value>& Value::as_arrays() const {
  if (type_ != ValueType::Array || elem_ != ValueType::Array)
    wrong_type(*this, kValueCtx, "array of array");
  return arrays_;
}

std::span<const uint8_t> Value::raw_elements() const {
  if (type_ != ValueType::Array || elem_ == ValueType::String || elem_ == ValueType::Array)
    wrong_type(*this, kValueCtx, "a numeric or bool array");
  return bytes_;
}

bool Value::operator==(const Value& o) const {
  return type_ == o.type_ && elem_ == o.elem_ && bits_ == o.bits_ && str_ == o.str_ &&
         bytes_ == o.bytes_ && strings_ == o.strings_ && arrays_ == o.arrays_;
}

std::string Value::describe() const {
  switch (type_) {
    case ValueType::String: return "string '" + str_ + "'";
    case ValueType::Array:
      return "array of " + std::to_string(size()) + " " + value_type_name(elem_);
    case ValueType::Bool: return std::string("bool ") + (bits_ ? "true" : "false");
    case ValueType::F32: return "f32 " + std::to_string(as_f32());
    case ValueType::F64: return "f64 " + std::to_string(as_f64());
    default: return std::string(value_type_name(type_)) + " " + wide_str(widen(type_, bits_));
  }
}

// ---- ggml types -------------------------------------------------------------------------------

uint32_t ggml_type_of(DType dtype) {
  switch (dtype) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q8_0: return 8;
    case DType::BF16: return 30;
    case DType::U32: break;
  }
  throw Error(ErrorKind::Format,
              std::string("gguf: dtype ") + dtype_name(dtype) + " has no ggml tensor type");
}

std::optional<DType> dtype_of_ggml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 8: return DType::Q8_0;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}

const char* ggml_type_name(uint32_t ggml_type) {
  const format::GgmlType* t = format::find_ggml_type(ggml_type);
  return t ? t->name : "unknown";
}

Shape TensorEntry::shape() const {
  std::vector<int64_t> dims(ne.rbegin(), ne.rend());
  return Shape(std::move(dims));
}

}  // namespace forge::gguf
