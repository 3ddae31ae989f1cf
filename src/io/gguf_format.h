// What the GGUF reader and writer share (gguf_read.cpp, gguf_write.cpp): the format's
// constants, ggml's tensor types with their block layouts, and the checks both sides apply
// to keys and names.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "forge/dtype.h"
#include "forge/gguf.h"

namespace forge::gguf::format {

inline constexpr unsigned char kMagic[4] = {0x47, 0x47, 0x55, 0x46};  // "GGUF"
inline constexpr uint32_t kVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr const char* kAlignmentKey = "general.alignment";
inline constexpr uint32_t kMaxDims = 4;
/// Arrays may hold arrays, this many levels deep in all (a plain array is depth 1).
inline constexpr int kMaxArrayDepth = 4;
/// The spec's limit on key length.
inline constexpr uint64_t kMaxKeyBytes = 65535;
/// ggml's limit on tensor names (GGML_MAX_NAME = 64 bytes with the terminating NUL): the
/// writer keeps to it so that llama.cpp can load what forge writes; the reader does not.
inline constexpr uint64_t kMaxWrittenNameBytes = 63;
/// Element count limit of one tensor (2^48): far above any real tensor, far below overflow.
inline constexpr uint64_t kMaxElements = uint64_t{1} << 48;

/// Bytes of one scalar of a value type (1 for bool); 0 for string and array.
inline size_t scalar_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64: return 8;
    case ValueType::String:
    case ValueType::Array: return 0;
  }
  return 0;
}

inline bool is_known_value_type(uint32_t t) { return t <= 12; }

/// Fewest bytes one array element of type t takes in a file: a string's u64 length, a
/// nested array's u32 type + u64 count.
inline uint64_t min_element_bytes(ValueType t) {
  if (t == ValueType::String) return 8;
  if (t == ValueType::Array) return 12;
  return scalar_bytes(t);
}

/// One ggml tensor type as GGUF files store it: elements per block, bytes per block.
struct GgmlType {
  uint32_t id;
  const char* name;
  uint32_t block;
  uint32_t block_bytes;
};

/// ggml's tensor types that GGUF files hold (ggml.h's enum ggml_type; removed and
/// intermediate-only ones, such as Q8_1, are left out and read as unknown).
inline constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},   {14, "Q6_K", 256, 210},
    {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},
    {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136},
    {24, "I8", 1, 1},         {25, "I16", 1, 2},        {26, "I32", 1, 4},
    {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},
    {39, "MXFP4", 32, 17},
};

inline const GgmlType* find_ggml_type(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

/// True when `s` is well-formed UTF-8 (RFC 3629: shortest forms, no surrogates, at most
/// U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      n = 2;
      cp = c & 0x1fu;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      cp = c & 0x0fu;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      cp = c & 0x07u;
    } else {
      return false;  // a continuation byte, an overlong lead (c0, c1) or past U+10FFFF
    }
    if (s.size() - i < n) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0u) != 0x80u) return false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n;
  }
  return true;
}

/// The reader's and writer's access to a Value's storage.
struct Access {
  /// A scalar of type t from its little-endian bytes (zero-extended to 64 bits).
  static Value scalar(ValueType t, uint64_t bits) {
    Value v;
    v.type_ = t;
    v.bits_ = bits;
    return v;
  }
  /// A numeric or bool array from its elements' little-endian bytes.
  static Value numeric_array(ValueType elem, std::vector<uint8_t> bytes) {
    Value v;
    v.type_ = ValueType::Array;
    v.elem_ = elem;
    v.bytes_ = std::move(bytes);
    return v;
  }
  static uint64_t bits(const Value& v) { return v.bits_; }
  /// Levels of array nesting: 0 for a scalar or string, 1 for an array of them, ...
  static int depth(const Value& v) {
    if (v.type_ != ValueType::Array) return 0;
    int d = 0;
    for (const Value& item : v.arrays_) d = std::max(d, depth(item));
    return d + 1;
  }
};

inline bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

/// v rounded up to a multiple of `align` (a power of two); nullopt on overflow.
inline std::optional<uint64_t> align_up(uint64_t v, uint64_t align) {
  const uint64_t r = v & (align - 1);
  if (r == 0) return v;
  const uint64_t pad = align - r;
  if (v > UINT64_MAX - pad) return std::nullopt;
  return v + pad;
}

// ---- typed conversions of values (gguf_value.cpp): Value's accessors and File's lookups.
// Each throws Error(Format) "<ctx>: ..." naming the expected and the actual type, or the
// value that does not fit.
[[noreturn]] void fail(const std::string& ctx, const std::string& what);
std::string type_desc(const Value& v);
uint64_t to_u64(const Value& v, const std::string& ctx, uint64_t max, const char* expected);
int64_t to_i64(const Value& v, const std::string& ctx, int64_t lo, int64_t hi,
               const char* expected);
double to_f64(const Value& v, const std::string& ctx);
float to_f32(const Value& v, const std::string& ctx);
bool to_bool(const Value& v, const std::string& ctx);
const std::string& to_text(const Value& v, const std::string& ctx);
const std::vector<std::string>& to_strings(const Value& v, const std::string& ctx);
std::vector<int64_t> to_i64s(const Value& v, const std::string& ctx);
std::vector<double> to_f64s(const Value& v, const std::string& ctx);

}  // namespace forge::gguf::format
