// What the GGUF test files share (test_gguf.cpp, test_gguf_errors.cpp): a fresh folder per
// test, byte-level file building, the value and dtype sets of the round trips, and checks.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include "file_test_util.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gguf.h"
#include "forge/tensor.h"
#include "pyref.h"

namespace forge::test::gguf_tests {

namespace fs = std::filesystem;
using gguf::File;
using gguf::Metadata;
using gguf::NamedTensors;
using gguf::Value;
using gguf::ValueType;

// A fresh, empty folder per test, removed afterwards.
class Gguf : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("forge_gguf_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Replaces the file: removing it first, because ext4 flushes a file rewritten in place
// (truncated) when it is closed, which made a loop of rewrites wait on the disk.
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::remove(path.c_str());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 37 + seed * 11 + 5) % 251);
  return v;
}

inline std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline Tensor bytes_tensor(const std::vector<uint8_t>& bytes, const Shape& shape, DType dt) {
  return Tensor::from_bytes(bytes.data(), bytes.size(), shape, dt);
}

template <typename T>
inline std::vector<uint8_t> le_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline std::string hex(std::string_view s) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

inline std::string fnv1a(std::span<const std::byte> data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : data) h = (h ^ static_cast<uint8_t>(b)) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A value in gguf_ref.py's summary form.
inline nlohmann::json value_json(const Value& v) {
  switch (v.type()) {
    case ValueType::String: return hex(v.as_string());
    case ValueType::Array: {
      nlohmann::json items = nlohmann::json::array();
      for (size_t i = 0; i < v.size(); ++i) items.push_back(value_json(v.at(i)));
      return {{"elem", static_cast<uint32_t>(v.element_type())}, {"items", items}};
    }
    case ValueType::F32: return std::bit_cast<uint32_t>(v.as_f32());
    case ValueType::F64: return std::bit_cast<uint64_t>(v.as_f64());
    case ValueType::Bool: return v.as_bool();
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: return v.as_i64();
    default: return v.as_u64();
  }
}

// What forge reads from a file, in gguf_ref.py's summary form.
inline nlohmann::json summary(const File& f) {
  nlohmann::json meta = nlohmann::json::array();
  for (const auto& [key, v] : f.metadata())
    meta.push_back(
        {{"key", key}, {"type", static_cast<uint32_t>(v.type())}, {"value", value_json(v)}});
  nlohmann::json tensors = nlohmann::json::array();
  for (const gguf::TensorEntry& e : f.tensors())
    tensors.push_back({{"name", e.name},
                       {"ne", e.ne},
                       {"type", e.ggml_type},
                       {"offset", e.offset - f.data_offset()},
                       {"nbytes", e.bytes},
                       {"fnv1a", fnv1a(f.raw(e.name))}});
  return {{"version", f.version()},
          {"alignment", f.alignment()},
          {"data_offset", f.data_offset()},
          {"file_size", fs::file_size(f.path())},
          {"metadata", meta},
          {"tensors", tensors}};
}

// Expects f() to throw Error of `kind` whose message contains `what` (and, when `prefix` is
// not empty, starts with it).
inline void expect_error(const std::function<void()>& f, ErrorKind kind, const std::string& what,
                         const std::string& prefix = "") {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << what;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nwanted: " << what;
    if (!prefix.empty()) {
      EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a forge::Error: " << e.what() << "; expected: " << what;
  }
}

inline void expect_open_error(const std::string& path, ErrorKind kind, const std::string& what) {
  expect_error([&] { File::open(path); }, kind, what, "gguf: " + path + ": ");
}

// ---- crafted files ------------------------------------------------------------------------

// GGUF bytes, field by field.
struct Bytes {
  std::string s;
  Bytes& raw(std::string_view b) {
    s.append(b);
    return *this;
  }
  Bytes& u8(uint8_t v) {
    s.push_back(static_cast<char>(v));
    return *this;
  }
  Bytes& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Bytes& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Bytes& str(std::string_view v) { return u64(v.size()).raw(v); }
  Bytes& head(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type,
                uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t align) {
    while (s.size() % align) s.push_back('\0');
    return *this;
  }
  Bytes& zeros(size_t n) {
    s.append(n, '\0');
    return *this;
  }
};

// A valid file with one key "a.b" (u32 7) and one F32 tensor "w" of ne [4] holding 1..4.
inline std::string minimal_file() {
  Bytes b;
  b.head(1, 1).kv_u32("a.b", 7).tensor("w", {4}, 0, 0).pad(32);
  for (float x : {1.0f, 2.0f, 3.0f, 4.0f}) b.u32(std::bit_cast<uint32_t>(x));
  return b.s;
}

// A file with no tensors and one key of type `type` whose value bytes are `value`.
inline std::string one_kv_file(std::string_view key, uint32_t type, std::string_view value) {
  return Bytes().head(0, 1).str(key).u32(type).raw(value).s;
}

// A file with the given tensor entries (no metadata) followed by `data_bytes` zero bytes of
// data, the data section at the next multiple of `align`.
struct Entry {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};
inline std::string tensors_file(const std::vector<Entry>& entries, size_t data_bytes,
                                std::string_view extra_kv = {}, uint64_t n_kv = 0,
                                size_t align = 32) {
  Bytes b;
  b.head(entries.size(), n_kv).raw(extra_kv);
  for (const Entry& e : entries) b.tensor(e.name, e.ne, e.type, e.offset);
  return b.pad(align).zeros(data_bytes).s;
}

// The metadata every round trip writes: every value type, arrays of each, strings, an empty
// array, nested arrays.
inline Metadata all_value_types() {
  return {
      {"general.architecture", Value::string("gpt2")},
      {"t.u8", Value::u8(250)},
      {"t.i8", Value::i8(-128)},
      {"t.u16", Value::u16(65535)},
      {"t.i16", Value::i16(-2)},
      {"t.u32", Value::u32(4294967295u)},
      {"t.i32", Value::i32(-7)},
      {"t.f32", Value::f32(1e-5f)},
      {"t.f32_nan", Value::f32(std::bit_cast<float>(0x7fc01234u))},
      {"t.bool", Value::boolean(true)},
      {"t.false", Value::boolean(false)},
      {"t.str", Value::string("h\xc3\xa9llo \xe2\x98\x83")},
      {"t.empty_str", Value::string("")},
      {"t.u64", Value::u64(~uint64_t{0})},
      {"t.i64", Value::i64(std::numeric_limits<int64_t>::min())},
      {"t.f64", Value::f64(-0.0)},
      {"a.u8s", Value::u8s({0, 255})},
      {"a.i8s", Value::i8s({-1, 127})},
      {"a.u16s", Value::u16s({1, 65535})},
      {"a.i16s", Value::i16s({-32768, 5})},
      {"a.u32s", Value::u32s({3, 4000000000u})},
      {"a.i32s", Value::i32s({-1, 2, std::numeric_limits<int32_t>::max()})},
      {"a.f32s", Value::f32s({0.5f, -1e30f, std::numeric_limits<float>::infinity()})},
      {"a.bools", Value::bools({false, true, true})},
      {"a.strings", Value::strings({"a", "", "\xe2\x98\x83", "merges x y"})},
      {"a.u64s", Value::u64s({0, ~uint64_t{0}})},
      {"a.i64s", Value::i64s({std::numeric_limits<int64_t>::min(), 9})},
      {"a.f64s", Value::f64s({1e300, -2.5})},
      {"a.empty", Value::u32s({})},
      {"a.nested", Value::arrays({Value::i32s({1, 2}), Value::strings({"x"}), Value::u8s({})})},
      {"a.deep", Value::arrays({Value::arrays({Value::arrays({Value::f32s({1.5f})})})})},
  };
}

// Tensors of every dtype GGUF holds, on `dev`.
inline NamedTensors all_dtypes(Device dev = Device::cpu()) {
  const std::vector<uint16_t> h = {0x3c00, 0x0001, 0x7c00, 0xfc00, 0x8000, 0x7e00};
  const std::vector<uint16_t> bf = {0x3f80, 0x4049, 0x0001, 0xff80};
  return {
      {"token_embd.weight", Tensor::from_vector(randn(15, 1), {3, 5}).to(dev)},
      {"f16", bytes_tensor(le_bytes(h), {2, 3}, DType::F16).to(dev)},
      {"bf16", bytes_tensor(le_bytes(bf), {4}, DType::BF16).to(dev)},
      {"blk.0.q8_0", bytes_tensor(pattern(2 * 2 * 34, 1), {2, 64}, DType::Q8_0).to(dev)},
      {"blk.0.q4_0", bytes_tensor(pattern(3 * 18, 2), {3, 32}, DType::Q4_0).to(dev)},
      {"rank4", Tensor::from_vector(randn(12, 3), {2, 1, 3, 2}).to(dev)},
      // A view: only its rows are written.
      {"rows", Tensor::from_vector(randn(12, 4), {4, 3}).narrow_rows(1, 2).to(dev)},
  };
}

inline void expect_tensors_equal(const File& f, const NamedTensors& tensors, uint64_t alignment) {
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    SCOPED_TRACE(name);
    const gguf::TensorEntry& e = f.tensors()[i];
    EXPECT_EQ(e.name, name);
    std::vector<uint64_t> ne;
    for (auto it = t.shape().dims().rbegin(); it != t.shape().dims().rend(); ++it)
      ne.push_back(static_cast<uint64_t>(*it));
    EXPECT_EQ(e.ne, ne);
    EXPECT_EQ(e.shape(), t.shape());
    ASSERT_TRUE(e.dtype.has_value());
    EXPECT_EQ(*e.dtype, t.dtype());
    EXPECT_EQ(e.ggml_type, gguf::ggml_type_of(t.dtype()));
    EXPECT_EQ(e.bytes, t.nbytes());
    EXPECT_EQ((e.offset - f.data_offset()) % alignment, 0u);
    const Tensor back = f.load(name);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.to_bytes(), t.to_bytes());
    const auto raw = f.raw(name);
    EXPECT_EQ(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()),
                                   reinterpret_cast<const uint8_t*>(raw.data()) + raw.size()),
              t.to_bytes());
  }
}

}  // namespace forge::test::gguf_tests
