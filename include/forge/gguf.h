// GGUF files (version 3, the format of llama.cpp and ggml: ggml's docs/gguf.md): reading
// (memory-mapped, fully validated) and writing (atomic).
//
// File layout, all little-endian:
//   "GGUF", u32 version = 3, u64 tensor_count, u64 metadata_kv_count,
//   metadata_kv_count x (key: string, u32 value type, value),
//   tensor_count x (name: string, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset),
//   zero padding to the alignment, then the data section; each tensor's offset is relative
//   to the data section's start and a multiple of the alignment.
// A string is a u64 byte count and that many bytes (no NUL). An array value is a u32
// element type, a u64 element count and the elements (strings and arrays included). The
// alignment is the u32 metadata value "general.alignment", 32 when absent.
// ne is ggml's dimension order: ne[0] is the contiguous (fastest) dimension, so a forge
// tensor of shape [rows, cols] has ne = {cols, rows}.
//
// Errors: every function throws forge::Error whose message starts with "gguf: <path>: "
// ("gguf: value: " for a Value accessor) - ErrorKind::Io when a file is missing, unreadable
// or cannot be written, ErrorKind::Format when its contents break the format (or a key,
// tensor or value type asked for is absent or different), ErrorKind::Unsupported when a
// valid tensor has a ggml type forge has no dtype for (Q4_K, I32, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "forge/device.h"
#include "forge/dtype.h"
#include "forge/error.h"
#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge::gguf {

namespace format {
struct Access;  // src/io/gguf_format.h: the reader's and writer's view of a Value's storage
}

/// The metadata value types, numbered as in the file.
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

/// "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
/// "f64".
const char* value_type_name(ValueType type);

/// A metadata value: a scalar, a string, or an array of one element type - scalars,
/// strings, or arrays (nested at most 4 levels deep, counting this one). Strings are bytes
/// as stored (keys and tensor names must be UTF-8; string values are not checked).
/// Comparison is exact: floats compare by bit pattern, so a NaN equals itself.
class Value {
 public:
  Value() = default;  // u8 0

  static Value u8(uint8_t v);
  static Value i8(int8_t v);
  static Value u16(uint16_t v);
  static Value i16(int16_t v);
  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value u64(uint64_t v);
  static Value i64(int64_t v);
  static Value f64(double v);

  static Value u8s(const std::vector<uint8_t>& v);
  static Value i8s(const std::vector<int8_t>& v);
  static Value u16s(const std::vector<uint16_t>& v);
  static Value i16s(const std::vector<int16_t>& v);
  static Value u32s(const std::vector<uint32_t>& v);
  static Value i32s(const std::vector<int32_t>& v);
  static Value f32s(const std::vector<float>& v);
  static Value bools(const std::vector<bool>& v);
  static Value strings(std::vector<std::string> v);
  static Value u64s(const std::vector<uint64_t>& v);
  static Value i64s(const std::vector<int64_t>& v);
  static Value f64s(const std::vector<double>& v);
  /// An array whose elements are arrays (each of its own element type). Error(Format) if an
  /// item is not an array or the nesting would exceed 4 levels.
  static Value arrays(std::vector<Value> items);

  ValueType type() const { return type_; }
  bool is_array() const { return type_ == ValueType::Array; }
  /// One of the eight integer types (bool is not an integer).
  bool is_integer() const;

  /// Scalars. An integer of any integer type is accepted where an integer is asked for if
  /// it fits; as_f64 / as_f32 accept f32, f64 and integers (converted, rounding as C++
  /// does). Error(Format) naming the value's type otherwise, or the value that does not fit.
  uint64_t as_u64() const;
  uint32_t as_u32() const;
  int64_t as_i64() const;
  int32_t as_i32() const;
  double as_f64() const;
  float as_f32() const;  // an f32 value bit for bit
  bool as_bool() const;
  const std::string& as_string() const;

  /// Arrays (Error(Format) for other types).
  ValueType element_type() const;
  size_t size() const;
  /// Element i as a Value (Error(Range) if i >= size()).
  Value at(size_t i) const;
  /// The elements of a string array.
  const std::vector<std::string>& as_strings() const;
  /// The elements of an integer array, each required to fit (as as_u64 / as_i64).
  std::vector<uint64_t> as_u64s() const;
  std::vector<int64_t> as_i64s() const;
  /// The elements of a float or integer array, converted to double.
  std::vector<double> as_f64s() const;
  std::vector<bool> as_bools() const;
  /// The elements of an array of arrays.
  const std::vector<Value>& as_arrays() const;
  /// The little-endian bytes of a numeric or bool array's elements, as in the file.
  std::span<const uint8_t> raw_elements() const;

  bool operator==(const Value& o) const;
  bool operator!=(const Value& o) const { return !(*this == o); }

  /// A short description for messages: "u32 7", "string 'gpt2'", "array of 3 string".
  std::string describe() const;

 private:
  friend struct format::Access;
  ValueType type_ = ValueType::U8;
  ValueType elem_ = ValueType::U8;    // arrays: the element type
  uint64_t bits_ = 0;                 // scalars: the value's little-endian bytes
  std::string str_;                   // string
  std::vector<uint8_t> bytes_;        // numeric and bool arrays: the elements' bytes
  std::vector<std::string> strings_;  // string arrays
  std::vector<Value> arrays_;         // arrays of arrays
};

/// Metadata in file order.
using Metadata = std::vector<std::pair<std::string, Value>>;
/// Named tensors, in file order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// ggml's tensor type numbers of forge's dtypes: F32 0, F16 1, Q4_0 2, Q8_0 8, BF16 30.
/// Error(Format) for U32, which ggml has no type for.
uint32_t ggml_type_of(DType dtype);
/// forge's dtype of a ggml type number, nullopt for the others.
std::optional<DType> dtype_of_ggml(uint32_t ggml_type);
/// ggml's name of a type number ("F32", "Q4_K", ...), "unknown" for none.
const char* ggml_type_name(uint32_t ggml_type);

/// One tensor's entry in a GGUF file (already validated).
struct TensorEntry {
  std::string name;
  std::vector<uint64_t> ne;    // ggml order: ne[0] is the contiguous dimension; 1 to 4 dims
  uint32_t ggml_type = 0;      // the file's type number
  std::optional<DType> dtype;  // forge's dtype for it; nullopt when forge has none
  uint64_t offset = 0;         // absolute byte offset of the data in the file
  uint64_t bytes = 0;          // size of the data
  /// The forge (row-major) shape: ne reversed.
  Shape shape() const;
  /// True when load() can make a tensor of it (dtype is set).
  bool loadable() const { return dtype.has_value(); }
};

/// A validated, memory-mapped (read-only file, private copy-on-write mapping) GGUF file.
/// Copies share the mapping; it stays alive while any copy or any zero-copy tensor loaded
/// from it lives. Const methods are safe to call from several threads.
class File {
 public:
  /// Maps `path` and validates all of it before returning. Every count and length is
  /// checked against the bytes left in the file before anything is allocated. Error(Io) if
  /// the file cannot be opened or mapped; Error(Format) for: a magic other than "GGUF"; a
  /// version other than 3 (1 and 2 included; a big-endian file says so); a file ending
  /// inside the header, a key, a value or a tensor entry; a count or string length that
  /// cannot fit in the bytes left; an empty key, a key over 65535 bytes or not valid UTF-8;
  /// a duplicate key; an unknown value type (of a value or an array's elements); a bool
  /// byte other than 0 and 1; arrays nested more than 4 levels; "general.alignment" not a
  /// u32 power of two; an empty, non-UTF-8 or duplicate tensor name; n_dims outside 1..4;
  /// a dimension of 0 (ggml allows empty tensors; forge refuses them); an element count over
  /// 2^48; an unknown ggml type (the message names the number); for a block type, ne[0] not
  /// a multiple of the block; an offset that is not a multiple of the alignment; data
  /// running past the end of the file; two tensors' data overlapping.
  static File open(const std::string& path);

  const std::string& path() const;
  uint32_t version() const;
  /// "general.alignment", or 32.
  uint64_t alignment() const;
  /// Absolute byte offset of the data section.
  uint64_t data_offset() const;

  /// All key-value pairs, in file order.
  const Metadata& metadata() const;
  /// The value of `key`, nullptr if absent.
  const Value* find(const std::string& key) const;
  /// The value of `key`; Error(Format) "no key '<key>'" if absent.
  const Value& get(const std::string& key) const;
  /// Typed lookups: Error(Format) naming the key and the expected type when the key is
  /// absent or of another type, as Value's accessors decide (integers of any integer type
  /// that fit; floats from f32, f64 or integers).
  uint64_t get_u64(const std::string& key) const;
  uint32_t get_u32(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  double get_f64(const std::string& key) const;
  float get_f32(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  std::vector<int64_t> get_i64s(const std::string& key) const;
  std::vector<double> get_f64s(const std::string& key) const;

  /// Tensor entries in file order.
  const std::vector<TensorEntry>& tensors() const;
  /// The entry of `name`, nullptr if absent.
  const TensorEntry* tensor(const std::string& name) const;

  /// The tensor on `device` in its own dtype (F32, F16, BF16, Q8_0 or Q4_0: no conversion),
  /// shape ne reversed. Zero-copy on the CPU when the data is aligned for its dtype (4 bytes
  /// for F32, 2 for the others: always, at the alignments real files use): the tensor
  /// aliases the private mapping, so writing to it never touches the file, but two loads of
  /// one name share memory (clone() for an independent copy). A copy otherwise and on other
  /// devices. Error(Format) "no tensor named ..." if absent; Error(Unsupported) naming the
  /// ggml type when forge has no dtype for it.
  Tensor load(const std::string& name, Device device = Device::cpu()) const;

  /// The tensor's bytes inside the mapping (any ggml type); valid while this object (or a
  /// copy) lives. Error(Format) if absent.
  std::span<const std::byte> raw(const std::string& name) const;

  struct Impl;  // private (src/io/gguf_read.cpp)

 private:
  explicit File(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

/// Writes a GGUF v3 file: `metadata` in order, then the tensors in order, each tensor's data
/// at the next multiple of `alignment` (zero padding, also after the last one, as llama.cpp
/// writes; a file without tensors ends after its metadata). Tensors may be of any dtype but U32
/// (F32, F16, BF16, Q8_0, Q4_0: bytes as stored), on any device, rank 1 to 4 with no dimension of
/// 0; ne is the shape reversed. "general.alignment" is written (as a u32, after the other keys)
/// only when alignment is not 32; a "general.alignment" in `metadata` must be a u32 equal to
/// `alignment`. Atomic: writes "<path>.tmp.<pid>", fsyncs, renames over `path`; on failure the temp
/// file is removed and an existing `path` is left intact. Error(Format) for: alignment not a power
/// of two; an empty, duplicate, non-UTF-8 or over 65535-byte key; an empty, duplicate or non-UTF-8
/// tensor name, or one over 63 bytes (ggml's limit); an undefined tensor, a U32 tensor, rank 0 or
/// over 4, a dimension of 0. Error(Io) when the file cannot be written (missing folder, disk full,
/// ...).
void save(const std::string& path, const Metadata& metadata, const NamedTensors& tensors,
          uint32_t alignment = 32);

}  // namespace forge::gguf
