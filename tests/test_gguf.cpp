// GGUF: round trips of every value type and tensor dtype, files from and to an independent
// Python reader/writer (tests/python/gguf_ref.py), typed lookups, zero-copy loads, every
// rejection of a malformed file (each with its own crafted bytes, the huge counts under a
// memory limit), the writer's errors and its atomicity.
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

#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gguf.h"
#include "forge/tensor.h"
#include "file_test_util.h"
#include "pyref.h"

namespace forge::test {
namespace {

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
void write_bytes(const std::string& path, const std::string& bytes) {
  std::remove(path.c_str());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 37 + seed * 11 + 5) % 251);
  return v;
}

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Tensor bytes_tensor(const std::vector<uint8_t>& bytes, const Shape& shape, DType dt) {
  return Tensor::from_bytes(bytes.data(), bytes.size(), shape, dt);
}

template <typename T>
std::vector<uint8_t> le_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::string hex(std::string_view s) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string fnv1a(std::span<const std::byte> data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : data) h = (h ^ static_cast<uint8_t>(b)) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A value in gguf_ref.py's summary form.
nlohmann::json value_json(const Value& v) {
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
nlohmann::json summary(const File& f) {
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
void expect_error(const std::function<void()>& f, ErrorKind kind, const std::string& what,
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

void expect_open_error(const std::string& path, ErrorKind kind, const std::string& what) {
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
std::string minimal_file() {
  Bytes b;
  b.head(1, 1).kv_u32("a.b", 7).tensor("w", {4}, 0, 0).pad(32);
  for (float x : {1.0f, 2.0f, 3.0f, 4.0f}) b.u32(std::bit_cast<uint32_t>(x));
  return b.s;
}

// A file with no tensors and one key of type `type` whose value bytes are `value`.
std::string one_kv_file(std::string_view key, uint32_t type, std::string_view value) {
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
std::string tensors_file(const std::vector<Entry>& entries, size_t data_bytes,
                         std::string_view extra_kv = {}, uint64_t n_kv = 0, size_t align = 32) {
  Bytes b;
  b.head(entries.size(), n_kv).raw(extra_kv);
  for (const Entry& e : entries) b.tensor(e.name, e.ne, e.type, e.offset);
  return b.pad(align).zeros(data_bytes).s;
}

// The metadata every round trip writes: every value type, arrays of each, strings, an empty
// array, nested arrays.
Metadata all_value_types() {
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
NamedTensors all_dtypes(Device dev = Device::cpu()) {
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

void expect_tensors_equal(const File& f, const NamedTensors& tensors, uint64_t alignment) {
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

// ---- round trips --------------------------------------------------------------------------

TEST_F(Gguf, RoundTripKeepsEveryValueTypeAndDtype) {
  const Metadata meta = all_value_types();
  const NamedTensors tensors = all_dtypes();
  const std::string p = path("rt.gguf");
  gguf::save(p, meta, tensors);
  const File f = File::open(p);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.metadata(), meta);  // alignment 32: general.alignment not added
  EXPECT_EQ(f.find("general.alignment"), nullptr);
  expect_tensors_equal(f, tensors, 32);
  // Data in order, each tensor padded to the alignment, the file ending after the last pad.
  uint64_t pos = f.data_offset();
  for (const auto& e : f.tensors()) {
    EXPECT_EQ(e.offset, pos) << e.name;
    pos += (e.bytes + 31) / 32 * 32;
  }
  EXPECT_EQ(fs::file_size(p), pos);
  EXPECT_EQ(f.tensor("token_embd.weight")->ne, (std::vector<uint64_t>{5, 3}));
  EXPECT_EQ(f.tensor("rank4")->ne, (std::vector<uint64_t>{2, 3, 1, 2}));
  EXPECT_EQ(f.tensor("nope"), nullptr);
  // The NaN payload and -0.0 survive bit for bit.
  EXPECT_EQ(std::bit_cast<uint32_t>(f.get("t.f32_nan").as_f32()), 0x7fc01234u);
  EXPECT_EQ(std::bit_cast<uint64_t>(f.get_f64("t.f64")), 0x8000000000000000ull);

  // A second file with another alignment: general.alignment is added, after the others.
  const std::string p64 = path("rt64.gguf");
  gguf::save(p64, meta, tensors, 64);
  const File g = File::open(p64);
  EXPECT_EQ(g.alignment(), 64u);
  ASSERT_EQ(g.metadata().size(), meta.size() + 1);
  EXPECT_EQ(g.metadata().back().first, "general.alignment");
  EXPECT_EQ(g.metadata().back().second, Value::u32(64));
  EXPECT_EQ(Metadata(g.metadata().begin(), g.metadata().end() - 1), meta);
  expect_tensors_equal(g, tensors, 64);
  // Given explicitly (and matching), it is written where it stands, once.
  Metadata with = meta;
  with.insert(with.begin() + 1, Metadata::value_type{"general.alignment", Value::u32(16)});
  gguf::save(p64, with, tensors, 16);
  EXPECT_EQ(File::open(p64).metadata(), with);
  expect_tensors_equal(File::open(p64), tensors, 16);
  // Nothing but metadata, and nothing at all.
  gguf::save(p64, meta, {});
  EXPECT_TRUE(File::open(p64).tensors().empty());
  EXPECT_EQ(File::open(p64).metadata(), meta);
  gguf::save(p64, {}, {});
  EXPECT_EQ(read_bytes(p64), Bytes().head(0, 0).s);  // no padding without tensors
  EXPECT_TRUE(File::open(p64).metadata().empty());
}

TEST_F(Gguf, WritesTensorsFromEveryDeviceAndLoadsOntoEveryDevice) {
  const NamedTensors cpu = all_dtypes();
  const std::string p = path("dev.gguf");
  gguf::save(p, {}, cpu);
  const std::string want = read_bytes(p);
  for (const DeviceInfo& info : list_devices()) {
    SCOPED_TRACE(info.device.str());
    gguf::save(p, {}, all_dtypes(info.device));
    EXPECT_EQ(read_bytes(p), want);
    const File f = File::open(p);
    for (const auto& [name, t] : cpu) {
      const Tensor back = f.load(name, info.device);
      EXPECT_EQ(back.device(), info.device);
      EXPECT_EQ(back.shape(), t.shape());
      EXPECT_EQ(back.to_bytes(), t.to_bytes()) << name;
    }
  }
}

TEST_F(Gguf, TypedLookupsAcceptFittingIntegersAndNameKeyAndType) {
  const std::string p = path("lookup.gguf");
  gguf::save(p, all_value_types(), {});
  const File f = File::open(p);
  const std::string pre = "gguf: " + p + ": ";
  // Integers of any integer type, where they fit.
  EXPECT_EQ(f.get_u64("t.u8"), 250u);
  EXPECT_EQ(f.get_u32("t.u16"), 65535u);
  EXPECT_EQ(f.get_i64("t.u32"), 4294967295);
  EXPECT_EQ(f.get_i64("t.i8"), -128);
  EXPECT_EQ(f.get_u64("t.u64"), ~uint64_t{0});
  EXPECT_EQ(f.get_i64("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.get_f64("t.i32"), -7.0);  // an integer where a float is asked for
  EXPECT_EQ(f.get_f32("t.f32"), 1e-5f);
  EXPECT_EQ(f.get_f64("t.f32"), static_cast<double>(1e-5f));
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_FALSE(f.get_bool("t.false"));
  EXPECT_EQ(f.get_string("t.str"), "h\xc3\xa9llo \xe2\x98\x83");
  EXPECT_EQ(f.get_strings("a.strings"),
            (std::vector<std::string>{"a", "", "\xe2\x98\x83", "merges x y"}));
  EXPECT_EQ(f.get_i64s("a.i32s"), (std::vector<int64_t>{-1, 2, 2147483647}));
  EXPECT_EQ(f.get_i64s("a.u8s"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f.get_f64s("a.f64s"), (std::vector<double>{1e300, -2.5}));
  EXPECT_EQ(f.get_f64s("a.i16s"), (std::vector<double>{-32768, 5}));
  // Wrong types, values that do not fit, absent keys: the key and the expected type named.
  expect_error([&] { f.get_u64("t.i32"); }, ErrorKind::Format,
               "key 't.i32': i32 -7 does not fit u64", pre);
  expect_error([&] { f.get_u32("t.u64"); }, ErrorKind::Format,
               "key 't.u64': u64 18446744073709551615 does not fit u32", pre);
  expect_error([&] { f.get_i64("t.u64"); }, ErrorKind::Format, "does not fit i64", pre);
  expect_error([&] { f.get_u64("t.f32"); }, ErrorKind::Format, "key 't.f32' is f32, expected u64",
               pre);
  expect_error([&] { f.get_u64("t.bool"); }, ErrorKind::Format, "is bool, expected u64", pre);
  expect_error([&] { f.get_string("t.u32"); }, ErrorKind::Format,
               "key 't.u32' is u32, expected string", pre);
  expect_error([&] { f.get_f64("t.str"); }, ErrorKind::Format, "is string, expected a number", pre);
  expect_error([&] { f.get_bool("t.u8"); }, ErrorKind::Format, "is u8, expected bool", pre);
  expect_error([&] { f.get_strings("a.i32s"); }, ErrorKind::Format,
               "key 'a.i32s' is array of i32, expected array of string", pre);
  expect_error([&] { f.get_i64s("a.f32s"); }, ErrorKind::Format,
               "is array of f32, expected an integer array", pre);
  expect_error([&] { f.get_i64s("a.u64s"); }, ErrorKind::Format, "element 1: u64", pre);
  expect_error([&] { f.get_i64s("t.u8"); }, ErrorKind::Format, "is u8, expected an array", pre);
  expect_error([&] { f.get_u64("nope"); }, ErrorKind::Format, "no key 'nope' (expected u64)", pre);
  expect_error([&] { f.get_strings("nope"); }, ErrorKind::Format,
               "no key 'nope' (expected array of string)", pre);
  expect_error([&] { f.get("nope"); }, ErrorKind::Format, "no key 'nope'", pre);
  EXPECT_EQ(f.find("nope"), nullptr);
  ASSERT_NE(f.find("t.u8"), nullptr);
  EXPECT_EQ(f.find("t.u8")->type(), ValueType::U8);
}

TEST_F(Gguf, ValueAccessors) {
  const Value a = Value::i16s({-3, 4});
  EXPECT_TRUE(a.is_array());
  EXPECT_EQ(a.element_type(), ValueType::I16);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(a.at(0), Value::i16(-3));
  EXPECT_EQ(a.at(1).as_i32(), 4);
  EXPECT_EQ(a.raw_elements().size(), 4u);
  EXPECT_EQ(a.as_i64s(), (std::vector<int64_t>{-3, 4}));
  expect_error([&] { (void)a.as_u64s(); }, ErrorKind::Format, "i16 -3 does not fit u64",
               "gguf: value");
  expect_error([&] { (void)a.at(2); }, ErrorKind::Range, "element 2 of an array of 2");
  expect_error([&] { (void)a.as_u64(); }, ErrorKind::Format, "is array of i16, expected u64");
  expect_error([&] { (void)Value::u8(1).size(); }, ErrorKind::Format, "expected an array");
  expect_error([&] { (void)Value::i64(-1).as_u32(); }, ErrorKind::Format, "does not fit u32");
  EXPECT_EQ(Value::u32(70000).as_i32(), 70000);
  expect_error([&] { (void)Value::i64(1LL << 40).as_i32(); }, ErrorKind::Format,
               "i64 1099511627776 does not fit i32");
  EXPECT_EQ(Value::strings({"p", "q"}).at(1), Value::string("q"));
  EXPECT_EQ(Value::bools({true, false}).as_bools(), (std::vector<bool>{true, false}));
  EXPECT_EQ(Value::bools({true}).at(0).as_bool(), true);
  EXPECT_EQ(Value::u64(3).as_f32(), 3.0f);
  EXPECT_EQ(Value::f64(0.5).as_f32(), 0.5f);
  // Comparison is exact and typed.
  EXPECT_NE(Value::u8(1), Value::i8(1));
  EXPECT_NE(Value::u8s({1}), Value::i8s({1}));
  EXPECT_NE(Value::f32(0.0f), Value::f32(-0.0f));
  EXPECT_EQ(Value::f32(std::nanf("")), Value::f32(std::nanf("")));
  EXPECT_EQ(Value::u32(7).describe(), "u32 7");
  EXPECT_EQ(Value::i8(-5).describe(), "i8 -5");
  EXPECT_EQ(Value::strings({"a", "b"}).describe(), "array of 2 string");
  // Arrays of arrays: items must be arrays, 4 levels at most.
  expect_error([] { Value::arrays({Value::u8(1)}); }, ErrorKind::Format,
               "item 0 is u8, not an array");
  const Value four = Value::arrays({Value::arrays({Value::arrays({Value::u8s({1})})})});
  EXPECT_EQ(four.as_arrays()[0].as_arrays()[0].as_arrays()[0].raw_elements().size(), 1u);
  expect_error([&] { Value::arrays({four}); }, ErrorKind::Format, "nested deeper than 4 levels");
}

// ---- the independent Python reader and writer -------------------------------------------

void check_python_file(const File& f, const nlohmann::json& py, uint64_t alignment) {
  EXPECT_EQ(summary(f), py);  // every key, type, value, tensor entry and checksum
  // And exact values, known here independently of both parsers.
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.get_string("general.architecture"), "gpt2");
  EXPECT_EQ(f.get_string("general.name"), "caf\xc3\xa9 \xe2\x98\x83");
  EXPECT_EQ(f.get("t.u8"), Value::u8(200));
  EXPECT_EQ(f.get("t.i8"), Value::i8(-100));
  EXPECT_EQ(f.get("t.u16"), Value::u16(65000));
  EXPECT_EQ(f.get("t.i16"), Value::i16(-30000));
  EXPECT_EQ(f.get("t.u32"), Value::u32(4000000000u));
  EXPECT_EQ(f.get("t.i32"), Value::i32(-2000000000));
  EXPECT_EQ(f.get("t.f32"), Value::f32(0.1f));
  EXPECT_EQ(f.get("t.bool"), Value::boolean(true));
  EXPECT_EQ(f.get("t.u64"), Value::u64((uint64_t{1} << 63) + 5));
  EXPECT_EQ(f.get("t.i64"), Value::i64(-(int64_t{1} << 62) - 3));
  EXPECT_EQ(f.get("t.f64"), Value::f64(-1.5e300));
  EXPECT_EQ(f.get("t.strings"), Value::strings({"a", "", "\xc3\xa9\xe2\x98\x83", "h e"}));
  EXPECT_EQ(f.get("t.i32s"), Value::i32s({1, -2, 2147483647, -2147483647 - 1}));
  EXPECT_EQ(f.get("t.f32s"), Value::f32s({0.5f, -0.0f, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(f.get("t.bools"), Value::bools({true, false, true}));
  EXPECT_EQ(f.get("t.u64s"), Value::u64s({0, ~uint64_t{0}}));
  EXPECT_EQ(f.get("t.empty"), Value::u32s({}));
  EXPECT_EQ(f.get("t.nested"),
            Value::arrays({Value::i16s({1, -2}), Value::strings({"x", "yz"}), Value::u8s({})}));
  if (alignment != 32) {
    EXPECT_EQ(f.metadata()[5].first, "general.alignment");
    EXPECT_EQ(f.get_u32("general.alignment"), alignment);
  }

  std::vector<std::string> names;
  for (const auto& e : f.tensors()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"tok.f32", "tok.f16", "blk.0.bf16", "blk.0.q8_0",
                                             "blk.1.q4_0", "blk.1.q4_k"}));
  // Data in reverse entry order: forge must not assume any order.
  EXPECT_GT(f.tensor("tok.f32")->offset, f.tensor("blk.1.q4_k")->offset);
  EXPECT_EQ(f.tensor("blk.1.q4_k")->offset, f.data_offset() + alignment);

  const Tensor t = f.load("tok.f32");
  EXPECT_EQ(t.shape(), Shape({2, 3}));  // ne [3, 2]
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{-1.0f, -0.75f, -0.5f, -0.25f, 0.0f, 0.25f}));
  const Tensor h = f.load("tok.f16");
  EXPECT_EQ(h.dtype(), DType::F16);
  EXPECT_EQ(h.to_bytes(), le_bytes(std::vector<uint16_t>{0x3c00, 0xc000, 0x7c00, 0x0001}));
  const Tensor b = f.load("blk.0.bf16");
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(b.shape(), Shape({2, 2}));
  EXPECT_EQ(b.to_bytes(), le_bytes(std::vector<uint16_t>{0x3f80, 0xc0a0, 0x7f80, 0x0001}));

  // Q8_0, ne [64, 2]: blocks of f16 scale 0.5 + b, then int8 (j * 7 + b * 3) % 255 - 127.
  const Tensor q8 = f.load("blk.0.q8_0");
  EXPECT_EQ(q8.dtype(), DType::Q8_0);
  EXPECT_EQ(q8.shape(), Shape({2, 64}));
  std::vector<uint8_t> want;
  const uint16_t q8_scales[] = {0x3800, 0x3e00, 0x4100, 0x4300};  // 0.5, 1.5, 2.5, 3.5
  for (int blk = 0; blk < 4; ++blk) {
    want.push_back(q8_scales[blk] & 0xff);
    want.push_back(q8_scales[blk] >> 8);
    for (int j = 0; j < 32; ++j)
      want.push_back(static_cast<uint8_t>(static_cast<int8_t>((j * 7 + blk * 3) % 255 - 127)));
  }
  EXPECT_EQ(q8.to_bytes(), want);
  // Q4_0, ne [32, 3]: scale -0.25 (b + 1), nibble bytes (j * 17 + b) % 256.
  const Tensor q4 = f.load("blk.1.q4_0");
  EXPECT_EQ(q4.dtype(), DType::Q4_0);
  EXPECT_EQ(q4.shape(), Shape({3, 32}));
  want.clear();
  const uint16_t q4_scales[] = {0xb400, 0xb800, 0xba00};  // -0.25, -0.5, -0.75
  for (int blk = 0; blk < 3; ++blk) {
    want.push_back(q4_scales[blk] & 0xff);
    want.push_back(q4_scales[blk] >> 8);
    for (int j = 0; j < 16; ++j) want.push_back(static_cast<uint8_t>((j * 17 + blk) % 256));
  }
  EXPECT_EQ(q4.to_bytes(), want);

  // Q4_K is a valid ggml type forge has no dtype for: listed, raw bytes, no load.
  const gguf::TensorEntry* k = f.tensor("blk.1.q4_k");
  ASSERT_NE(k, nullptr);
  EXPECT_FALSE(k->loadable());
  EXPECT_EQ(k->ggml_type, 12u);
  EXPECT_STREQ(gguf::ggml_type_name(k->ggml_type), "Q4_K");
  EXPECT_EQ(k->bytes, 144u);
  const auto raw = f.raw("blk.1.q4_k");
  ASSERT_EQ(raw.size(), 144u);
  for (size_t j = 0; j < raw.size(); ++j)
    ASSERT_EQ(static_cast<uint8_t>(raw[j]), (j * 13 + 5) % 256) << j;
  expect_error([&] { f.load("blk.1.q4_k"); }, ErrorKind::Unsupported,
               "tensor 'blk.1.q4_k' has ggml type Q4_K (12), which forge has no dtype for",
               "gguf: " + f.path() + ": ");
}

TEST_F(Gguf, ReadsFilesFromIndependentPythonWriter) {
  for (int alignment : {32, 64}) {
    SCOPED_TRACE(alignment);
    const std::string p = path("py" + std::to_string(alignment) + ".gguf");
    nlohmann::json py;
    try {
      py = run_python("gguf_ref.py", {{"mode", "write"},
                                      {"path", p},
                                      {"alignment", alignment == 32 ? nlohmann::json()
                                                                    : nlohmann::json(alignment)}});
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
    check_python_file(File::open(p), py, alignment);
  }
}

TEST_F(Gguf, IndependentPythonReaderReadsForgeFiles) {
  const Metadata meta = all_value_types();
  const NamedTensors tensors = all_dtypes();
  for (uint32_t alignment : {32u, 64u}) {
    SCOPED_TRACE(alignment);
    const std::string p = path("forge" + std::to_string(alignment) + ".gguf");
    gguf::save(p, meta, tensors, alignment);
    nlohmann::json py;
    try {
      py = run_python("gguf_ref.py", {{"mode", "read"}, {"path", p}});
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
    const File f = File::open(p);
    EXPECT_EQ(py, summary(f));
    // What Python saw, against what was written (not against forge's reading of it).
    EXPECT_EQ(py["version"], 3);
    EXPECT_EQ(py["alignment"], alignment);
    const auto& pm = py["metadata"];
    ASSERT_EQ(pm.size(), meta.size() + (alignment != 32 ? 1 : 0));
    for (size_t i = 0; i < meta.size(); ++i) {
      EXPECT_EQ(pm[i]["key"], nlohmann::json(meta[i].first));
      EXPECT_EQ(pm[i]["type"], static_cast<uint32_t>(meta[i].second.type()));
      EXPECT_EQ(pm[i]["value"], value_json(meta[i].second)) << meta[i].first;
    }
    EXPECT_EQ(pm[1]["value"], 250);
    EXPECT_EQ(pm[11]["value"], nlohmann::json(hex("h\xc3\xa9llo \xe2\x98\x83")));
    if (alignment != 32) {
      EXPECT_EQ(pm.back()["key"], nlohmann::json("general.alignment"));
      EXPECT_EQ(pm.back()["type"], 4);
      EXPECT_EQ(pm.back()["value"], alignment);
    }
    const auto& pt = py["tensors"];
    ASSERT_EQ(pt.size(), tensors.size());
    uint64_t offset = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& [name, t] = tensors[i];
      EXPECT_EQ(pt[i]["name"], nlohmann::json(name));
      std::vector<uint64_t> ne(t.shape().dims().rbegin(), t.shape().dims().rend());
      EXPECT_EQ(pt[i]["ne"], nlohmann::json(ne));
      EXPECT_EQ(pt[i]["type"], gguf::ggml_type_of(t.dtype()));
      EXPECT_EQ(pt[i]["offset"], offset);
      EXPECT_EQ(pt[i]["nbytes"], t.nbytes());
      const std::vector<uint8_t> bytes = t.to_bytes();
      EXPECT_EQ(
          pt[i]["fnv1a"],
          nlohmann::json(fnv1a({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()})));
      offset += (t.nbytes() + alignment - 1) / alignment * alignment;
    }
    EXPECT_EQ(pt[3]["type"], 8);   // Q8_0
    EXPECT_EQ(pt[4]["type"], 2);   // Q4_0
    EXPECT_EQ(pt[2]["type"], 30);  // BF16
    EXPECT_EQ(pt[1]["type"], 1);   // F16
  }
}

// ---- zero-copy loads ----------------------------------------------------------------------

TEST_F(Gguf, CpuLoadOfAlignedTensorAliasesTheMappingAndOutlivesTheFile) {
  const std::string p = path("zc.gguf");
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  gguf::save(p, {}, {{"x", Tensor::from_vector(w, {2, 3})}, {"q", all_dtypes()[3].second}});
  const std::string before = read_bytes(p);
  Tensor t, again, q;
  {
    const File f = File::open(p);
    const auto raw = f.raw("x");
    t = f.load("x");
    again = f.load("x");
    q = f.load("q");
    const auto* data = reinterpret_cast<const std::byte*>(t.data<float>());
    EXPECT_EQ(data, raw.data());  // inside the mapping, exactly the tensor's bytes
    EXPECT_EQ(t.storage()->bytes(), raw.size());
    EXPECT_EQ(t.data<float>(), again.data<float>());
    EXPECT_EQ(q.storage()->host_ptr(), static_cast<const void*>(f.raw("q").data()));
  }  // the File is gone; the tensors keep the mapping alive
  EXPECT_EQ(t.to_vector<float>(), w);
  EXPECT_EQ(q.to_bytes(), all_dtypes()[3].second.to_bytes());
  t.data<float>()[0] = 99.0f;  // a private mapping: the file does not change
  EXPECT_EQ(again.to_vector<float>()[0], 99.0f);
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(File::open(p).load("x").to_vector<float>(), w);
  EXPECT_EQ(t.clone().to_vector<float>(), (std::vector<float>{99, 2, 3, 4, 5, 6}));
}

TEST_F(Gguf, UnalignedTensorIsCopied) {
  // Alignment 1 lets an F32 tensor start at an odd byte: the load must copy.
  const std::string kv = Bytes().kv_u32("general.alignment", 1).s;
  Bytes b;
  b.head(1, 1).raw(kv).tensor("x", {2}, 0, 1);
  const size_t data = b.s.size();
  b.u8(0xee);
  for (float v : {1.5f, -2.0f}) b.u32(std::bit_cast<uint32_t>(v));
  const std::string p = path("odd.gguf");
  write_bytes(p, b.s);
  const File f = File::open(p);
  EXPECT_EQ(f.alignment(), 1u);
  EXPECT_EQ(f.data_offset(), data);
  ASSERT_EQ(f.tensor("x")->offset, data + 1);
  ASSERT_NE(reinterpret_cast<uintptr_t>(f.raw("x").data()) % 4, 0u);
  const Tensor t = f.load("x");
  EXPECT_NE(static_cast<const void*>(t.data<float>()), static_cast<const void*>(f.raw("x").data()));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  expect_error([&] { f.load("y"); }, ErrorKind::Format, "no tensor named 'y'", "gguf: " + p);
  expect_error([&] { f.raw("y"); }, ErrorKind::Format, "no tensor named 'y'", "gguf: " + p);
}

// ---- rejections ---------------------------------------------------------------------------

TEST_F(Gguf, MinimalCraftedFileOpens) {
  // The positive control of the crafted files below.
  const std::string p = path("min.gguf");
  write_bytes(p, minimal_file());
  const File f = File::open(p);
  EXPECT_EQ(f.get_u32("a.b"), 7u);
  EXPECT_EQ(f.load("w").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(f.data_offset(), 96u);  // 24 + 19 (key, type, value) + 33 (tensor) = 76 -> 96
}

TEST_F(Gguf, RejectsBadMagicVersionAndUnreadableFiles) {
  expect_open_error(path("missing.gguf"), ErrorKind::Io, "No such file");
  expect_open_error(dir_.string(), ErrorKind::Io, "not a regular file");
  const std::string p = path("bad.gguf");
  std::string bytes = minimal_file();
  bytes[3] = 'G';
  write_bytes(p, bytes);
  expect_open_error(p, ErrorKind::Format,
                    "not a GGUF file: magic bytes 47 47 55 47, expected 47 47 55 46");
  write_bytes(p, "");
  expect_open_error(p, ErrorKind::Format, "truncated: magic at byte 0 needs 4 bytes");
  write_bytes(p, "GGU");
  expect_open_error(p, ErrorKind::Format, "truncated: magic");
  for (uint32_t v : {0u, 1u, 2u, 4u, 1000u}) {
    bytes = minimal_file();
    bytes[4] = static_cast<char>(v & 0xff);
    bytes[5] = static_cast<char>(v >> 8);
    write_bytes(p, bytes);
    expect_open_error(
        p, ErrorKind::Format,
        "GGUF version " + std::to_string(v) + " is not supported (forge reads version 3)");
  }
  write_bytes(p, Bytes().raw("GGUF").raw(std::string("\0\0\0\x03", 4)).u64(0).u64(0).s);
  expect_open_error(p, ErrorKind::Format, "a big-endian GGUF file");
  write_bytes(p, Bytes().raw("GGUF").u32(3).s);
  expect_open_error(p, ErrorKind::Format, "truncated: tensor_count at byte 8");
  write_bytes(p, Bytes().raw("GGUF").u32(3).u64(0).u32(0).s);
  expect_open_error(p, ErrorKind::Format, "truncated: metadata_kv_count at byte 16");
}

TEST_F(Gguf, RejectsEveryTruncation) {
  const std::string p = path("t.gguf");
  gguf::save(p, all_value_types(), all_dtypes());
  const std::string bytes = read_bytes(p);
  uint64_t end = 0;  // the last tensor byte: the padding after it may go
  {
    const File f = File::open(p);
    for (const auto& e : f.tensors()) end = std::max(end, e.offset + e.bytes);
  }
  ASSERT_LT(end, bytes.size());
  // Every length inside the header, and cuts into each tensor's data.
  std::vector<uint64_t> cuts;
  uint64_t header = 0;
  {
    const File f = File::open(p);
    header = f.data_offset();
    for (const auto& e : f.tensors()) {
      cuts.push_back(e.offset);
      cuts.push_back(e.offset + e.bytes - 1);
    }
  }
  for (uint64_t n = 0; n < header; ++n) cuts.push_back(n);
  const std::string q = path("cut.gguf");
  for (uint64_t n : cuts) {
    write_bytes(q, bytes.substr(0, n));
    try {
      File::open(q);
      ADD_FAILURE() << "a file cut to " << n << " of " << bytes.size() << " bytes opened";
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::Format) << e.what();
      ASSERT_EQ(std::string(e.what()).rfind("gguf: " + q + ": ", 0), 0u) << e.what();
    }
  }
  write_bytes(q, bytes.substr(0, end));
  EXPECT_NO_THROW(File::open(q));
  // Inside a value, and inside the tensor data.
  write_bytes(q, one_kv_file("k", 10, std::string(5, '\0')));
  expect_open_error(q, ErrorKind::Format, "truncated: key 'k' u64 at byte 37 needs 8 bytes");
  write_bytes(q, bytes.substr(0, end - 1));
  expect_open_error(q, ErrorKind::Format, "past the end of the file");
}

// Every case of a count or length far past the file's size: each must be refused before
// anything is allocated for it.
std::vector<std::pair<std::string, std::string>> huge_count_cases() {
  const uint64_t huge = uint64_t{1} << 62;
  return {
      {Bytes().head(huge, 0).zeros(64).s, "tensor_count 4611686018427387904 cannot fit"},
      {Bytes().head(0, huge).zeros(64).s, "metadata_kv_count 4611686018427387904 cannot fit"},
      {Bytes().head(0, 1).u64(huge).raw("abc").zeros(16).s, "key 0 at byte 24 has length"},
      {Bytes().head(0, 1).u64(~uint64_t{0}).zeros(16).s, "past the end of the file"},
      {one_kv_file("k", 8, Bytes().u64(huge).raw("x").s), "key 'k' string at byte 37 has length"},
      {one_kv_file("k", 9, Bytes().u32(10).u64(huge).zeros(16).s),
       "array of 4611686018427387904 u64 elements cannot fit in the 16 bytes left"},
      {one_kv_file("k", 9, Bytes().u32(0).u64(~uint64_t{0}).zeros(16).s), "u8 elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(8).u64(huge).zeros(16).s), "string elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(8).u64(1).u64(huge).s),
       "key 'k' element 0 at byte 49 has length"},
      {one_kv_file("k", 9, Bytes().u32(9).u64(huge).zeros(16).s), "array elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(9).u64(1).u32(9).u64(1).u32(12).u64(huge).s),
       "f64 elements cannot fit"},
      {Bytes().head(1, 0).u64(huge).zeros(40).s, "tensor name at byte 24 has length"},
      {Bytes().head(1, 0).str("w").u32(0x80000000u).zeros(40).s,
       "tensor 'w' has 2147483648 dimensions"},
      {tensors_file({{"w", {~uint64_t{0}, ~uint64_t{0}}, 0, 0}}, 64),
       "has more than 2^48 elements"},
      {tensors_file({{"w", {4}, 0, huge}}, 64), "past the end of the file"},
      // Counts an unchecked reader could allocate for (0.5 to 1 GiB) rather than refuse
      // at once: only the memory limit below tells these apart.
      {Bytes().head(0, uint64_t{1} << 23).zeros(64).s, "metadata_kv_count 8388608 cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(8).u64(uint64_t{1} << 25).zeros(16).s),
       "array of 33554432 string elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(9).u64(uint64_t{1} << 23).zeros(16).s),
       "array of 8388608 array elements cannot fit"},
      {Bytes().head(uint64_t{1} << 23, 0).zeros(64).s, "tensor_count 8388608 cannot fit"},
  };
}

TEST_F(Gguf, RejectsHugeCountsInTinyFilesFastWithoutAllocating) {
  const auto cases = huge_count_cases();
  std::vector<std::string> paths;
  for (size_t i = 0; i < cases.size(); ++i) {
    paths.push_back(path("huge" + std::to_string(i) + ".gguf"));
    write_bytes(paths.back(), cases[i].first);
    ASSERT_LT(cases[i].first.size(), 200u);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    expect_open_error(paths[i], ErrorKind::Format, cases[i].second);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);

  // Again in a child process whose address space may grow by 256 MiB at most: an attempt to
  // allocate for any of these counts would fail there (bad_alloc, not forge::Error) or be
  // killed. AddressSanitizer reserves terabytes of shadow memory, so there the limit is not
  // set (the checks above still run).
#if defined(__SANITIZE_ADDRESS__)
  const bool limit = false;
#else
  const bool limit = true;
#endif
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(20);  // a hang fails too
    if (limit) {
      std::ifstream statm("/proc/self/statm");
      uint64_t pages = 0;
      statm >> pages;
      const uint64_t used = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
      const rlimit lim{used + (uint64_t{256} << 20), used + (uint64_t{256} << 20)};
      if (pages == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(100);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      try {
        File::open(paths[i]);
        ::_exit(static_cast<int>(1 + i));
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Format ||
            std::string(e.what()).find(cases[i].second) == std::string::npos)
          ::_exit(static_cast<int>(1 + i));
      } catch (...) {
        ::_exit(static_cast<int>(50 + i));  // bad_alloc and friends
      }
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "case index + 1 (or + 50: not a forge::Error)";
}

TEST_F(Gguf, RejectsBadKeys) {
  const std::string p = path("k.gguf");
  const std::string u32_7 = Bytes().u32(4).u32(7).s;
  write_bytes(p, Bytes().head(0, 1).str("").raw(u32_7).s);
  expect_open_error(p, ErrorKind::Format, "empty key at byte 24");
  for (const char* bad :
       {"\xff\xfe", "a\xc0\xaf", "\xed\xa0\x80", "\xe2\x98", "\xf4\x90\x80\x80"}) {
    write_bytes(p, Bytes().head(0, 1).str(bad).raw(u32_7).s);
    expect_open_error(p, ErrorKind::Format, "key at byte 24 is not valid UTF-8");
  }
  write_bytes(p, Bytes().head(0, 1).str("\xe2\x98\x83.ok").raw(u32_7).s);  // valid UTF-8
  EXPECT_EQ(File::open(p).get_u32("\xe2\x98\x83.ok"), 7u);
  write_bytes(p, Bytes().head(0, 1).str(std::string(65536, 'k')).raw(u32_7).s);
  expect_open_error(p, ErrorKind::Format, "has 65536 bytes, over the 65535-byte limit");
  write_bytes(p, Bytes().head(0, 1).str(std::string(65535, 'k')).raw(u32_7).s);
  EXPECT_NO_THROW(File::open(p));
  write_bytes(p, Bytes().head(0, 3).kv_u32("a", 1).kv_u32("b", 2).kv_u32("a", 3).s);
  expect_open_error(p, ErrorKind::Format, "duplicate key 'a'");
}

TEST_F(Gguf, RejectsBadValues) {
  const std::string p = path("v.gguf");
  write_bytes(p, one_kv_file("k", 13, std::string(8, '\0')));
  expect_open_error(p, ErrorKind::Format, "key 'k' has unknown value type 13");
  write_bytes(p, one_kv_file("k", 0xffffffffu, std::string(8, '\0')));
  expect_open_error(p, ErrorKind::Format, "key 'k' has unknown value type 4294967295");
  write_bytes(p, one_kv_file("k", 9, Bytes().u32(99).u64(0).s));
  expect_open_error(p, ErrorKind::Format, "key 'k' array has unknown value type 99");
  write_bytes(p, one_kv_file("k", 7, "\x02"));
  expect_open_error(p, ErrorKind::Format, "key 'k': bool byte 2 is neither 0 nor 1");
  write_bytes(p, one_kv_file("k", 9, Bytes().u32(7).u64(3).raw(std::string("\x01\x00\x03", 3)).s));
  expect_open_error(p, ErrorKind::Format, "key 'k': bool element 2 is byte 3");
  // Arrays of arrays: 4 levels are read, 5 refused.
  Bytes four;
  four.u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(5).u64(1).u32(42);
  write_bytes(p, one_kv_file("k", 9, four.s));
  EXPECT_EQ(File::open(p).get("k"),
            Value::arrays({Value::arrays({Value::arrays({Value::i32s({42})})})}));
  write_bytes(p, one_kv_file("k", 9, Bytes().u32(9).u64(1).raw(four.s).s));
  expect_open_error(p, ErrorKind::Format,
                    "key 'k' element 0 element 0 element 0 element 0: arrays nested deeper than 4");
  // The alignment key: a u32 power of two.
  write_bytes(p, one_kv_file("general.alignment", 5, Bytes().u32(32).s));
  expect_open_error(p, ErrorKind::Format, "general.alignment is i32, expected u32");
  write_bytes(p, one_kv_file("general.alignment", 8, Bytes().str("32").s));
  expect_open_error(p, ErrorKind::Format, "general.alignment is string, expected u32");
  for (uint32_t a : {0u, 24u, 33u, 0xffffffffu}) {
    write_bytes(p, one_kv_file("general.alignment", 4, Bytes().u32(a).s));
    expect_open_error(p, ErrorKind::Format,
                      "general.alignment " + std::to_string(a) + " is not a power of two");
  }
  write_bytes(p, one_kv_file("general.alignment", 4, Bytes().u32(8).s));
  EXPECT_EQ(File::open(p).alignment(), 8u);
}

TEST_F(Gguf, RejectsBadTensorEntries) {
  const std::string p = path("e.gguf");
  auto expect = [&](const std::vector<Entry>& entries, size_t data, const std::string& what,
                    std::string_view kv = {}, uint64_t n_kv = 0) {
    write_bytes(p, tensors_file(entries, data, kv, n_kv));
    expect_open_error(p, ErrorKind::Format, what);
  };
  // Positive control: the same helper makes files that open.
  write_bytes(p, tensors_file({{"a", {8}, 0, 0}, {"b", {32, 2}, 8, 32}}, 32 + 68));
  EXPECT_EQ(File::open(p).tensors().size(), 2u);

  expect({{"w", {4}, 0, 0}, {"w", {4}, 0, 32}}, 64, "duplicate tensor name 'w'");
  expect({{"", {4}, 0, 0}}, 32, "empty tensor name at byte 24");
  expect({{"w\xff", {4}, 0, 0}}, 32, "tensor name at byte 24 is not valid UTF-8");
  expect({{"w", {}, 0, 0}}, 32, "tensor 'w' has 0 dimensions (1 to 4 allowed)");
  expect({{"w", {1, 1, 1, 1, 1}, 0, 0}}, 32, "tensor 'w' has 5 dimensions");
  write_bytes(p, tensors_file({{"w", {1, 1, 1, 1}, 0, 0}}, 32));
  EXPECT_EQ(File::open(p).load("w").shape(), Shape({1, 1, 1, 1}));
  expect({{"w", {4, 0}, 0, 0}}, 32, "tensor 'w' has a dimension of 0 (ne [4, 0])");
  expect({{"w", {uint64_t{1} << 40, uint64_t{1} << 9}, 0, 0}}, 32, "more than 2^48 elements");
  expect({{"w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0}}, 32, "more than 2^48 elements");
  for (uint32_t type : {4u, 5u, 9u, 31u, 40u, 1000u})
    expect({{"w", {256}, type, 0}}, 1024,
           "tensor 'w' has unknown ggml type " + std::to_string(type));
  expect({{"w", {48}, 8, 0}}, 64, "tensor 'w': ne[0] = 48 is not a multiple of Q8_0's block of 32");
  expect({{"w", {16, 2}, 2, 0}}, 64, "ne[0] = 16 is not a multiple of Q4_0's block of 32");
  expect({{"w", {128}, 12, 0}}, 256, "ne[0] = 128 is not a multiple of Q4_K's block of 256");
  // A block dimension other than ne[0] need not be whole blocks.
  write_bytes(p, tensors_file({{"w", {32, 3}, 8, 0}}, 3 * 34));
  EXPECT_EQ(File::open(p).load("w").shape(), Shape({3, 32}));
  expect({{"w", {4}, 0, 4}}, 64, "tensor 'w': offset 4 is not a multiple of the alignment 32");
  // With alignment 8, offset 8 is fine and 4 is not.
  const std::string a8 = Bytes().kv_u32("general.alignment", 8).s;
  write_bytes(p, tensors_file({{"w", {4}, 0, 8}}, 64, a8, 1, 8));
  EXPECT_EQ(File::open(p).tensor("w")->offset % 8, 0u);
  write_bytes(p, tensors_file({{"w", {4}, 0, 4}}, 64, a8, 1, 8));
  expect_open_error(p, ErrorKind::Format, "offset 4 is not a multiple of the alignment 8");
  // Data past the end: by one byte, by a huge offset, by a huge size.
  expect({{"w", {4}, 0, 0}}, 15, "tensor 'w': 16 bytes at offset 0 of the data section (byte 64)");
  expect({{"w", {4}, 0, 0}}, 15, "past the end of the file");
  expect({{"w", {4}, 0, uint64_t{1} << 63}}, 16, "past the end of the file");
  expect({{"w", {uint64_t{1} << 24, uint64_t{1} << 24}, 0, 0}}, 16, "past the end of the file");
  // Overlaps: the same offset, partial overlap, overlap out of entry order.
  expect({{"a", {4}, 0, 0}, {"b", {4}, 0, 0}}, 64, "tensors 'a' and 'b' overlap");
  expect({{"a", {16}, 0, 0}, {"b", {4}, 0, 32}}, 64, "tensors 'a' and 'b' overlap: bytes [");
  expect({{"b", {4}, 0, 64}, {"c", {4}, 0, 96}, {"a", {24}, 0, 0}}, 128,
         "tensors 'a' and 'b' overlap");
  // Back to back with no gap is fine.
  write_bytes(p, tensors_file({{"a", {8}, 0, 0}, {"b", {8}, 0, 32}}, 64));
  EXPECT_NO_THROW(File::open(p));
}

TEST_F(Gguf, FuzzedFilesFailCleanly) {
  const std::string p = path("f.gguf");
  gguf::save(p, all_value_types(), all_dtypes());
  const std::string good = read_bytes(p);
  uint64_t header = 0;
  {
    const File f = File::open(p);
    header = f.data_offset();
  }
  std::mt19937 rng(7);
  int rejected = 0, opened = 0;
  for (int it = 0; it < 1000; ++it) {
    std::string bad = good;
    if (it % 3 == 2) {
      bad.resize(rng() % bad.size());
    } else {  // flip a few bytes of the header (counts, lengths, types, offsets)
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k)
        bad[rng() % header] = static_cast<char>(rng());
    }
    write_bytes(p, bad);
    try {
      const File f = File::open(p);
      for (const auto& e : f.tensors())
        if (e.loadable()) f.load(e.name);
      for (const auto& [k, v] : f.metadata()) (void)v.describe();
      ++opened;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("gguf: " + p + ": ", 0), 0u) << e.what();
      EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 700);
  EXPECT_GT(opened, 0);  // flips inside string values or padding leave a valid file
}

// ---- writer errors ------------------------------------------------------------------------

TEST_F(Gguf, SaveRejectsBadInputs) {
  const std::string p = path("w.gguf");
  const Tensor t = Tensor::zeros({4});
  auto expect = [&](const Metadata& meta, const NamedTensors& ts, const std::string& what,
                    uint32_t alignment = 32) {
    expect_error([&] { gguf::save(p, meta, ts, alignment); }, ErrorKind::Format, what,
                 "gguf: " + p + ": ");
  };
  expect({}, {{"a", t}, {"a", t}}, "duplicate tensor name 'a'");
  expect({}, {{"", t}}, "empty tensor name");
  expect({}, {{"a\xff", t}}, "tensor name 'a\xff' is not valid UTF-8");
  expect({}, {{std::string(64, 'n'), t}}, "has 64 bytes, over ggml's limit of 63");
  expect({}, {{"a", Tensor()}}, "tensor 'a' is undefined");
  expect({}, {{"ids", Tensor::from_vector(std::vector<uint32_t>{1, 2}, {2})}},
         "tensor 'ids' is u32, which ggml has no tensor type for");
  expect({}, {{"s", Tensor::from_vector(std::vector<float>{2.5f}, Shape{})}},
         "tensor 's' has rank 0");
  expect({}, {{"r5", Tensor::zeros({1, 1, 1, 1, 2})}}, "tensor 'r5' has rank 5");
  expect({}, {{"e", Tensor::zeros({0, 3})}}, "tensor 'e' has a dimension of 0 (shape [0, 3])");
  expect({{"k", Value::u8(1)}, {"k", Value::u8(2)}}, {}, "duplicate key 'k'");
  expect({{"", Value::u8(1)}}, {}, "empty key");
  expect({{"k\xc3", Value::u8(1)}}, {}, "key 'k\xc3' is not valid UTF-8");
  expect({{std::string(65536, 'k'), Value::u8(1)}}, {}, "over the 65535-byte limit");
  expect({}, {{"a", t}}, "alignment 24 is not a power of two", 24);
  expect({}, {{"a", t}}, "alignment 0 is not a power of two", 0);
  expect({{"general.alignment", Value::u32(64)}}, {{"a", t}},
         "general.alignment in the metadata is u32 64, but the alignment is u32 32");
  expect({{"general.alignment", Value::u64(32)}}, {{"a", t}},
         "general.alignment in the metadata is u64 32");
  EXPECT_FALSE(fs::exists(p));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 0);
  EXPECT_EQ(gguf::ggml_type_of(DType::Q8_0), 8u);
  EXPECT_EQ(gguf::dtype_of_ggml(30), DType::BF16);
  EXPECT_EQ(gguf::dtype_of_ggml(12), std::nullopt);
  expect_error([] { gguf::ggml_type_of(DType::U32); }, ErrorKind::Format, "no ggml tensor type");
  // Missing folders and a target that cannot be replaced are Io errors.
  expect_error(
      [&] {
        gguf::save(path("no/such/dir/w.gguf"), {}, {{"a", t}});
      },
      ErrorKind::Io, "cannot create", "gguf: " + path("no/such/dir/w.gguf") + ": ");
  expect_error([&] { gguf::save(dir_.string(), {}, {{"a", t}}); }, ErrorKind::Io, "cannot rename");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 0);
}

// Runs f with the effective user id of "nobody" when running as root, for whom permission
// bits do not bind (the saved user id stays root, so it is restored afterwards).
void as_unprivileged(const std::function<void()>& f) {
  const uid_t euid = ::geteuid();
  if (euid != 0) return f();
  ASSERT_EQ(::seteuid(65534), 0);
  struct Restore {
    ~Restore() { (void)::seteuid(0); }
  } restore;
  f();
}

TEST_F(Gguf, SaveIntoUnwritableFolderLeavesOldFileIntact) {
  const std::string p = path("old.gguf");
  gguf::save(p, {{"v", Value::u32(1)}},
             {{"w", Tensor::from_vector(std::vector<float>{1, 2}, {2})}});
  const std::string before = read_bytes(p);
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  bool threw_io = false;
  std::string msg;
  as_unprivileged([&] {
    try {
      gguf::save(p, {{"v", Value::u32(2)}}, {{"w", Tensor::zeros({8})}});
    } catch (const Error& e) {
      threw_io = e.kind() == ErrorKind::Io;
      msg = e.what();
    }
  });
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
  EXPECT_TRUE(threw_io) << msg;
  EXPECT_NE(msg.find("gguf: " + p + ": cannot create"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(File::open(p).get_u32("v"), 1u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
}

// A full disk, simulated with RLIMIT_FSIZE (writes past the limit fail with EFBIG once
// SIGXFSZ is ignored): the save throws Error(Io), the old file survives, no temp file stays.
TEST_F(Gguf, FailedWriteKeepsOldFileAndRemovesTemp) {
  const std::string p = path("full.gguf");
  gguf::save(p, {}, {{"old", Tensor::from_vector(std::vector<float>{1, 2}, {2})}});
  const std::string before = read_bytes(p);
  const Tensor big = Tensor::zeros({1 << 18});  // 1 MiB

  const std::string msg = io_error_past_file_limit([&] { gguf::save(p, {}, {{"new", big}}); });
  EXPECT_FALSE(msg.empty()) << "no Error(Io)";
  EXPECT_NE(msg.find("write failed"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
  EXPECT_EQ(File::open(p).load("old").to_vector<float>(), (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace forge::test
