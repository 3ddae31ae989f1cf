// safetensors: round trips, a file from an independent Python writer (F16/BF16 checked on
// all 65536 bit patterns), sharded folders. The rejections and the writer's errors:
// test_safetensors_errors.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <tuple>

#include "forge/backend.h"
#include "forge/error.h"
#include "forge/safetensors.h"
#include "pyref.h"
#include "safetensors_test_util.h"

using namespace forge;
using namespace forge::test;

// ---- writing and reading back ------------------------------------------------------------

TEST_F(SafeTensors, RoundTripIsBitIdenticalAndHeaderAligned) {
  std::vector<float> w = randn(15, 1);
  w[3] = -0.0f;
  w[4] = std::numeric_limits<float>::infinity();
  w[5] = std::numeric_limits<float>::denorm_min();
  w[6] = std::bit_cast<float>(0x7fc01234u);  // NaN with a payload
  const NamedTensors tensors = {
      {"w", Tensor::from_vector(w, {3, 5})},
      {"ids", Tensor::from_vector(std::vector<uint32_t>{0, 7, 4294967295u}, {3})},
      {"scalar", Tensor::from_vector(std::vector<float>{2.5f}, Shape{})},
      {"empty", Tensor::zeros({0, 3})},
      // A view: only its rows must be written.
      {"rows", Tensor::from_vector(randn(12, 2), {4, 3}).narrow_rows(1, 2)},
      {"h", raw16({0x3c00, 0x0001, 0x7c00, 0xfc00, 0x8000, 0x3555, 0x7e00}, DType::F16)},
      {"b", raw16({0x3f80, 0x4049, 0x0001, 0xff80}, DType::BF16)},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
  const std::string p = path("rt.safetensors");
  save_safetensors(p, tensors, meta);

  // The raw header, checked without forge's parser.
  const std::string bytes = read_bytes(p);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["step"], "12");
  EXPECT_EQ(header["w"]["dtype"], "F32");
  EXPECT_EQ(header["w"]["data_offsets"], nlohmann::json({0, 60}));
  EXPECT_EQ(header["h"]["dtype"], "F16");
  EXPECT_EQ(bytes.size(), 8 + n + 60 + 12 + 4 + 0 + 24 + 14 + 8);

  const SafeTensorsFile f = SafeTensorsFile::open(p);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"w", "ids", "scalar", "empty", "rows", "h", "b"}));
  EXPECT_EQ(f.info("w").shape, Shape({3, 5}));
  EXPECT_EQ(f.info("w").dtype, "F32");
  EXPECT_EQ(f.info("scalar").shape, Shape{});
  EXPECT_EQ(bits_of(f.load("w").to_vector<float>()), bits_of(w));
  EXPECT_EQ(f.load("ids").dtype(), DType::U32);
  EXPECT_EQ(f.load("ids").to_vector<uint32_t>(), (std::vector<uint32_t>{0, 7, 4294967295u}));
  EXPECT_EQ(f.load("scalar").to_vector<float>(), std::vector<float>{2.5f});
  EXPECT_EQ(f.load("empty").shape(), Shape({0, 3}));
  EXPECT_EQ(f.load("rows").to_vector<float>(), tensors[4].second.to_vector<float>());
  // F16/BF16 come back as F32; expected values worked out by hand from the bit patterns.
  const std::vector<float> h = f.load("h").to_vector<float>();
  ASSERT_EQ(h.size(), 7u);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], std::ldexp(1.0f, -24));  // smallest f16 subnormal
  EXPECT_EQ(h[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(std::bit_cast<uint32_t>(h[4]), 0x80000000u);  // -0
  EXPECT_EQ(h[5], 0.333251953125f);                       // 0x3555 = 2^-2 * (1 + 341/1024)
  EXPECT_TRUE(std::isnan(h[6]));
  const std::vector<float> b = f.load("b").to_vector<float>();
  EXPECT_EQ(b, (std::vector<float>{1.0f, 3.140625f, std::bit_cast<float>(0x00010000u),
                                   -std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(f.raw("h").size(), 14u);
}

TEST_F(SafeTensors, ZeroCopyTensorIsWritableWithoutTouchingTheFile) {
  const std::string p = path("zc.safetensors");
  save_safetensors(p, {{"x", Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2})}});
  const std::string before = read_bytes(p);
  Tensor t, again;
  {
    const SafeTensorsFile f = SafeTensorsFile::open(p);
    t = f.load("x");
    again = f.load("x");
    // Aligned F32 data: both loads alias the mapping.
    EXPECT_EQ(t.data<float>(), again.data<float>());
  }  // the file object is gone; the tensors keep the mapping alive
  t.data<float>()[0] = 99.0f;
  EXPECT_EQ(again.to_vector<float>()[0], 99.0f);
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(SafeTensorsFile::open(p).load("x").to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  // Kernels see the mapped tensor like any other.
  EXPECT_EQ(t.clone().to_vector<float>(), (std::vector<float>{99, 2, 3, 4}));
}

TEST_F(SafeTensors, LoadErrors) {
  const std::string p = path("e.safetensors");
  save_safetensors(p, {{"x", Tensor::zeros({2})}});
  const SafeTensorsFile f = SafeTensorsFile::open(p);
  EXPECT_FALSE(f.contains("y"));
  try {
    f.load("y");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("no tensor named 'y'"), std::string::npos);
  }
  EXPECT_THROW(f.info("y"), Error);
  EXPECT_THROW(f.raw("y"), Error);
  EXPECT_THROW(f.load("x", Device("nosuchbackend", 0)), Error);
}

// ---- the independent Python writer --------------------------------------------------------

TEST_F(SafeTensors, ReadsFileFromIndependentPythonWriter) {
  const std::string p = path("py.safetensors");
  nlohmann::json out;
  try {
    out = forge::test::run_python("write_safetensors.py", {{"path", p}});
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  const SafeTensorsFile f = SafeTensorsFile::open(p);
  EXPECT_EQ(f.metadata().at("note"), "h\xc3\xa9llo \xe2\x98\x83");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const std::string snow = "caf\xc3\xa9.\xe2\x98\x83.weight";  // \u escapes decoded to UTF-8
  EXPECT_TRUE(f.contains(snow));

  // Every tensor: names in data order, shapes, offsets, values.
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> order;
  for (const auto& [name, e] : out["tensors"].items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.contains(name));
    const TensorInfo& ti = f.info(name);
    EXPECT_EQ(ti.dtype, e["dtype"].get<std::string>());
    EXPECT_EQ(ti.shape.dims(), e["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(ti.begin, e["data_offsets"][0].get<uint64_t>());
    EXPECT_EQ(ti.end, e["data_offsets"][1].get<uint64_t>());
    order.emplace_back(ti.begin, ti.end, name);
    if (e.contains("u32")) {
      EXPECT_EQ(f.load(name).to_vector<uint32_t>(), e["u32"].get<std::vector<uint32_t>>());
    }
    if (!e.contains("f32_bits")) continue;
    const Tensor t = f.load(name);
    EXPECT_EQ(t.dtype(), DType::F32);
    EXPECT_EQ(t.shape(), ti.shape);
    const std::vector<uint32_t> got = bits_of(t.to_vector<float>());
    const auto& want = e["f32_bits"];
    ASSERT_EQ(got.size(), want.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      bool ok;
      if (want[i].is_object()) {  // NaN: Python gives only the sign
        const float g = std::bit_cast<float>(got[i]);
        ok = std::isnan(g) && (got[i] >> 31) == want[i]["nan"].get<uint32_t>();
      } else {
        ok = got[i] == want[i].get<uint32_t>();
      }
      if (!ok && ++bad <= 5) {
        ADD_FAILURE() << name << "[" << i << "] = " << std::hex << got[i];
      }
    }
    EXPECT_EQ(bad, 0u);
    if (e.contains("torch_f32_bits")) {  // torch's conversion, NaN payloads included
      EXPECT_EQ(got, e["torch_f32_bits"].get<std::vector<uint32_t>>());
    }
  }
  std::sort(order.begin(), order.end());
  std::vector<std::string> want_names;
  for (const auto& o : order) want_names.push_back(std::get<2>(o));
  EXPECT_EQ(f.names(), want_names);

  // The F32 tensor after the 3-byte U8 one is not 4-byte aligned: loads copy.
  EXPECT_NE(f.load("f32_unaligned").data<float>(), f.load("f32_unaligned").data<float>());
  EXPECT_EQ(f.load("f32_aligned").data<float>(), f.load("f32_aligned").data<float>());
  // Valid but not loadable.
  EXPECT_FALSE(f.info("i64").loadable());
  try {
    f.load("i64");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("I64"), std::string::npos);
  }
  EXPECT_EQ(f.raw("u8_pad").size(), 3u);
  EXPECT_EQ(static_cast<int>(f.raw("u8_pad")[2]), 3);
}

// ---- sharded folders ----------------------------------------------------------------------

TEST_F(SafeTensors, ShardedRoundTripThroughTensorDirectory) {
  NamedTensors ts;
  for (int i = 0; i < 5; ++i)
    ts.emplace_back("layer." + std::to_string(i), Tensor::from_vector(randn(16, 10 + i), {4, 4}));
  ts.emplace_back("big", Tensor::from_vector(randn(64, 20), {64}));  // over the limit alone
  ts.emplace_back("tail", Tensor::from_vector(std::vector<uint32_t>{5}, {1}));
  const auto files = save_safetensors_sharded(dir_.string(), ts, 150, {{"format", "pt"}});
  // 64-byte tensors, 150-byte shards: [0,1] [2,3] [4] [big] [tail].
  ASSERT_EQ(files.size(), 6u);
  EXPECT_EQ(files[0], "model-00001-of-00005.safetensors");
  EXPECT_EQ(files.back(), "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(read_bytes(path("model.safetensors.index.json")));
  EXPECT_EQ(index["weight_map"]["layer.3"], "model-00002-of-00005.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00004-of-00005.safetensors");
  EXPECT_EQ(index["metadata"]["total_size"], 5 * 64 + 256 + 4);

  const TensorDirectory d = TensorDirectory::open(dir_.string());
  EXPECT_EQ(d.files().size(), 5u);
  std::vector<std::string> want;
  for (const auto& [n, t] : ts) want.push_back(n);
  EXPECT_EQ(d.names(), want);
  for (const auto& [n, t] : ts) {
    SCOPED_TRACE(n);
    if (t.dtype() == DType::F32) {
      EXPECT_EQ(bits_of(d.load(n).to_vector<float>()), bits_of(t.to_vector<float>()));
    } else {
      EXPECT_EQ(d.load(n).to_vector<uint32_t>(), t.to_vector<uint32_t>());
    }
  }
  EXPECT_EQ(d.info("big").shape, Shape({64}));
  EXPECT_EQ(d.file_of("tail").metadata().at("format"), "pt");
  EXPECT_THROW(d.load("nope"), Error);
  // The index file itself opens too.
  EXPECT_EQ(TensorDirectory::open(path("model.safetensors.index.json")).names(), want);

  // Re-saving into one file removes the stale index, so the folder reads the new weights.
  save_safetensors_sharded(dir_.string(), {{"only", Tensor::zeros({1})}}, 1 << 20);
  EXPECT_FALSE(fs::exists(path("model.safetensors.index.json")));
  EXPECT_EQ(TensorDirectory::open(dir_.string()).names(), std::vector<std::string>{"only"});
  EXPECT_EQ(TensorDirectory::open(path("model.safetensors")).names(),
            std::vector<std::string>{"only"});
  EXPECT_THROW(save_safetensors_sharded(dir_.string(), ts, 0), Error);
  EXPECT_THROW(save_safetensors_sharded(path("nowhere"), ts, 100), Error);
}

TEST_F(SafeTensors, RejectsBadIndexes) {
  save_safetensors(path("s1.safetensors"), {{"a", Tensor::zeros({1})}, {"b", Tensor::zeros({1})}});
  save_safetensors(path("s2.safetensors"), {{"c", Tensor::zeros({1})}});
  const std::string idx = path("model.safetensors.index.json");
  auto with_map = [&](const std::string& map) {
    write_bytes(idx, "{\"metadata\": {\"total_size\": 12}, \"weight_map\": " + map + "}");
  };
  with_map("{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}");
  EXPECT_EQ(TensorDirectory::open(dir_.string()).names(),
            (std::vector<std::string>{"a", "b", "c"}));

  with_map("{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"s3.safetensors\"}");
  expect_dir_error(dir_.string(), ErrorKind::Io, "s3.safetensors: No such file");
  with_map("{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"../s2.safetensors\"}");
  expect_dir_error(dir_.string(), ErrorKind::Format,
                   "'../s2.safetensors' is not a plain file name");
  with_map("{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"/etc/passwd\"}");
  expect_dir_error(dir_.string(), ErrorKind::Format, "is not a plain file name");
  with_map("{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"..\"}");
  expect_dir_error(dir_.string(), ErrorKind::Format, "is not a plain file name");
  with_map(
      "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"s2.safetensors\","
      " \"d\": \"s2.safetensors\"}");
  expect_dir_error(dir_.string(), ErrorKind::Format,
                   "weight_map maps 'd' to 's2.safetensors', which holds no such tensor");
  with_map("{\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}");
  expect_dir_error(dir_.string(), ErrorKind::Format,
                   "holds tensor 'b', which weight_map does not list");
  with_map("{\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\", \"c\": \"s2.safetensors\"}");
  expect_dir_error(
      dir_.string(), ErrorKind::Format,
      "tensor 'b' is in shard 's1.safetensors' but weight_map maps it to 's2.safetensors'");
  with_map(
      "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"s2.safetensors\","
      " \"c\": \"s1.safetensors\"}");
  expect_dir_error(dir_.string(), ErrorKind::Format, "duplicate key 'c'");
  with_map("{\"a\": 1}");
  expect_dir_error(dir_.string(), ErrorKind::Format, "weight_map['a'] is not a file name string");
  with_map("[]");
  expect_dir_error(dir_.string(), ErrorKind::Format, "no \"weight_map\" object");
  write_bytes(idx, "[1]");
  expect_dir_error(dir_.string(), ErrorKind::Format, "index is not a JSON object");
  write_bytes(idx, "{\"weight_map\": ");
  expect_dir_error(dir_.string(), ErrorKind::Format, "not valid JSON");
  write_bytes(idx, std::string(100000, '[') + std::string(100000, ']'));
  expect_dir_error(dir_.string(), ErrorKind::Format, "nested too deeply");
  // A corrupt shard is reported with its own path.
  write_bytes(path("s2.safetensors"), le64(2) + "[]");
  with_map("{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}");
  expect_dir_error(dir_.string(), ErrorKind::Format, "s2.safetensors: header is not a JSON object");

  fs::remove(idx);
  expect_dir_error(dir_.string(), ErrorKind::Io, "holds neither model.safetensors nor");
  expect_dir_error(path("absent"), ErrorKind::Io, "not found");
}
