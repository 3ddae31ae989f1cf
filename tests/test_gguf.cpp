// GGUF: round trips of every value type and tensor dtype, files from and to an independent
#include "gguf_test_util.h"

namespace forge::test {
namespace {

using namespace gguf_tests;
using gguf::File;
using gguf::Metadata;
using gguf::NamedTensors;
using gguf::Value;
using gguf::ValueType;

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

}  // namespace
}  // namespace forge::test
