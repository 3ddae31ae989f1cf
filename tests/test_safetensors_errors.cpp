// safetensors' rejections: bad and truncated files, malformed headers (and the edge cases the
// format allows), fuzzed files, and the writer's errors (bad input, unwritable paths, a
// failed write that keeps the old file).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "forge/error.h"
#include "forge/safetensors.h"
#include "safetensors_test_util.h"

using namespace forge;
using namespace forge::test;

// ---- rejections ---------------------------------------------------------------------------

TEST_F(SafeTensors, RejectsBadFilesAndHeaderLengths) {
  expect_open_error(path("missing.safetensors"), ErrorKind::Io, "No such file");
  expect_open_error(dir_.string(), ErrorKind::Io, "not a regular file");
  const std::string p = path("bad.safetensors");
  write_bytes(p, "");
  expect_open_error(p, ErrorKind::Format, "fewer than the 8-byte header length");
  write_bytes(p, std::string("\x02\x00\x00", 3));
  expect_open_error(p, ErrorKind::Format, "fewer than the 8-byte header length");
  write_bytes(p, le64(3) + "{}");  // one byte short
  expect_open_error(p, ErrorKind::Format, "header length 3 exceeds the file's remaining 2 bytes");
  write_bytes(p, le64(~uint64_t{0}) + "{}");
  expect_open_error(p, ErrorKind::Format, "exceeds the 100 MiB limit");
  write_bytes(p, le64((100ull << 20) + 1) + "{}");
  expect_open_error(p, ErrorKind::Format, "exceeds the 100 MiB limit");
  // The smallest valid file: no tensors.
  write_bytes(p, file_bytes("{}", ""));
  EXPECT_TRUE(SafeTensorsFile::open(p).names().empty());
}

TEST_F(SafeTensors, RejectsTruncatedFile) {
  const std::string p = path("t.safetensors");
  save_safetensors(p, {{"a", Tensor::zeros({4})}, {"b", Tensor::zeros({8})}});
  const std::string bytes = read_bytes(p);
  write_bytes(p, bytes.substr(0, bytes.size() - 1));
  expect_open_error(p, ErrorKind::Format,
                    "tensor 'b': data_offsets [16, 48] outside the data buffer of 47 bytes");
  write_bytes(p, bytes.substr(0, 20));
  expect_open_error(p, ErrorKind::Format, "exceeds the file's remaining 12 bytes");
}

TEST_F(SafeTensors, RejectsMalformedHeaders) {
  const std::string p = path("m.safetensors");
  const std::string d8(8, '\0');
  struct Case {
    std::string header, data, what;
  };
  const std::vector<Case> cases = {
      {"{not json}", "", "header is not valid JSON"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}", d8,
       "header is not valid JSON"},
      {"{} x", "", "header is not valid JSON"},
      {"[1, 2]", "", "header is not a JSON object (found an array)"},
      {"\"str\"", "", "header is not a JSON object (found a string)"},
      {"{\"a\": \"\xff\xfe\"}", "", "header is not valid JSON"},  // invalid UTF-8
      {std::string(10000, '['), "", "header is not a JSON object"},
      {"{\"a\": {\"dtype\": \"F31\", \"shape\": [2], \"data_offsets\": [0, 8]}}", d8,
       "tensor 'a': unknown dtype 'F31'"},
      {"{\"a\": {\"dtype\": \"f32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", d8,
       "unknown dtype 'f32'"},
      {"{\"a\": {\"dtype\": 5, \"shape\": [2], \"data_offsets\": [0, 8]}}", d8,
       "dtype must be a string"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", d8,
       "shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 16]}}", d8,
       "data_offsets [0, 16] outside the data buffer of 8 bytes"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 0]}}", d8,
       "data_offsets [8, 0] begin after end"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
       " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
       d8, "tensors 'a' and 'b' overlap at byte 4"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", d8,
       "bytes 0 to 4 of the data buffer belong to no tensor"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", d8,
       "the data buffer has 8 bytes but the tensors use 4"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
       " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
       d8, "duplicate tensor name 'a'"},
      {"{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, "
       "8]}}",
       d8, "tensor 'a': duplicate field 'dtype'"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", d8,
       "negative dimension -2"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2.0], \"data_offsets\": [0, 8]}}", d8,
       "shape entry 2.0 is not a non-negative integer"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", d8,
       "shape entries must be non-negative integers, found a string"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [[2]], \"data_offsets\": [0, 8]}}", d8,
       "shape entries must be non-negative integers, found an array"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": 2, \"data_offsets\": [0, 8]}}", d8,
       "shape must be an array of integers"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296],"
       " \"data_offsets\": [0, 8]}}",
       d8, "is too large"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [9223372036854775808], \"data_offsets\": [0, 8]}}",
       d8, "dimension 9223372036854775808 is too large"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", d8,
       "data_offsets must hold exactly two numbers"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8, 8]}}", d8,
       "data_offsets must hold exactly two numbers"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [-1, 8]}}", d8,
       "negative data offset -1"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8.5]}}", d8,
       "data offset 8.5 is not a non-negative integer"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", d8, "tensor 'a': missing data_offsets"},
      {"{\"a\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", d8, "tensor 'a': missing dtype"},
      {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", d8, "missing shape"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8], \"x\": 1}}", d8,
       "unexpected field 'x'"},
      {"{\"a\": [1]}", "", "tensor 'a': entry must be an object, found an array"},
      {"{\"a\": null}", "", "tensor 'a': entry must be an object, found null"},
      {"{\"a\": {\"dtype\": {\"x\": 1}}}", "", "dtype must be a string, found an object"},
      {"{\"__metadata__\": {\"k\": 1}}", "",
       "__metadata__ value for 'k' must be a string, found a number"},
      {"{\"__metadata__\": {\"k\": {\"x\": \"y\"}}}", "",
       "__metadata__ value for 'k' must be a string, found an object"},
      {"{\"__metadata__\": [\"a\"]}", "",
       "__metadata__ must be an object of strings, found an array"},
      {"{\"__metadata__\": \"x\"}", "",
       "__metadata__ must be an object of strings, found a string"},
      {"{\"__metadata__\": {}, \"__metadata__\": {}}", "", "duplicate __metadata__"},
      {"{\"__metadata__\": {\"k\": \"a\", \"k\": \"b\"}}", "", "duplicate __metadata__ key 'k'"},
      {"{\"a\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 2]}}",
       std::string(2, '\0'), "is not a whole number of bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header.substr(0, 200));
    write_bytes(p, file_bytes(c.header, c.data));
    expect_open_error(p, ErrorKind::Format, c.what);
  }
}

TEST_F(SafeTensors, AcceptsEdgeCasesTheFormatAllows) {
  const std::string p = path("ok.safetensors");
  // Known-but-unloadable dtypes, sub-byte F4 with a whole byte count, zero-size tensors at
  // shared offsets, metadata only, padding with spaces and other JSON whitespace.
  write_bytes(
      p, file_bytes("{\"z1\": {\"dtype\": \"F32\", \"shape\": [0, 7], \"data_offsets\": [0, 0]},"
                    " \"z2\": {\"dtype\": \"I64\", \"shape\": [5, 0], \"data_offsets\": [0, 0]},"
                    " \"f4\": {\"dtype\": \"F4\", \"shape\": [2, 2], \"data_offsets\": [0, 2]},"
                    " \"d\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [2, 10]},"
                    "\n\t\"__metadata__\": {}}   ",
                    std::string(10, '\x01')));
  const SafeTensorsFile f = SafeTensorsFile::open(p);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"z1", "z2", "f4", "d"}));
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.load("z1").shape(), Shape({0, 7}));
  EXPECT_THROW(f.load("d"), Error);
  EXPECT_EQ(f.raw("d").size(), 8u);
}

// Random corruption of a valid file: every outcome is a clean open or a forge::Error (the
// sanitizer build checks that nothing reads out of bounds).
TEST_F(SafeTensors, FuzzedFilesNeverCrash) {
  const std::string p = path("fz.safetensors");
  save_safetensors(p,
                   {{"a", Tensor::from_vector(randn(6, 3), {2, 3})},
                    {"b", Tensor::from_vector(std::vector<uint32_t>{1, 2}, {2})}},
                   {{"k", "v"}});
  const std::string good = read_bytes(p);
  std::mt19937 rng(7);
  int opened = 0, rejected = 0;
  for (int it = 0; it < 600; ++it) {
    std::string bad = good;
    const int mode = it % 3;
    if (mode == 0) {  // flip a few bytes anywhere
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k)
        bad[rng() % bad.size()] = static_cast<char>(rng());
    } else if (mode == 1) {  // truncate
      bad.resize(rng() % bad.size());
    } else {  // replace one header byte with a JSON-significant character
      const char pool[] = "{}[]\",:0123456789-.e \\u";
      bad[8 + rng() % (bad.size() - 8 - 32)] = pool[rng() % (sizeof pool - 1)];
    }
    write_bytes(p, bad);
    try {
      const SafeTensorsFile f = SafeTensorsFile::open(p);
      for (const std::string& n : f.names()) {
        if (f.info(n).loadable()) f.load(n);
      }
      ++opened;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("safetensors: ", 0), 0u);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 400);
  EXPECT_GT(opened, 0);  // some flips only touch tensor data
}

// ---- writer errors ------------------------------------------------------------------------

TEST_F(SafeTensors, SaveRejectsBadInputsAndUnwritablePaths) {
  const Tensor t = Tensor::zeros({2});
  auto expect_save_error = [&](const std::string& p, const NamedTensors& ts, ErrorKind kind,
                               const std::string& what,
                               const std::map<std::string, std::string>& meta = {}) {
    try {
      save_safetensors(p, ts, meta);
      ADD_FAILURE() << "saved; expected: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("safetensors: " + p, 0), 0u) << e.what();
    }
  };
  const std::string p = path("w.safetensors");
  expect_save_error(p, {{"a", t}, {"a", t}}, ErrorKind::Format, "duplicate tensor name 'a'");
  expect_save_error(p, {{"", t}}, ErrorKind::Format, "empty tensor name");
  expect_save_error(p, {{"__metadata__", t}}, ErrorKind::Format, "reserved");
  expect_save_error(p, {{"a", Tensor()}}, ErrorKind::Format, "undefined");
  expect_save_error(p, {{"a\xff", t}}, ErrorKind::Format, "not valid UTF-8");
  expect_save_error(p, {{"a", t}}, ErrorKind::Format, "not valid UTF-8", {{"k", "\xc3"}});
  EXPECT_FALSE(fs::exists(p));
  expect_save_error(path("no/such/folder/w.safetensors"), {{"a", t}}, ErrorKind::Io,
                    "cannot create");
  expect_save_error(dir_.string(), {{"a", t}}, ErrorKind::Io, "cannot rename");
  EXPECT_FALSE(fs::exists(dir_.string() + ".tmp." + std::to_string(::getpid())));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 0);
}

// A full disk, simulated with RLIMIT_FSIZE (writes past the limit fail with EFBIG once
// SIGXFSZ is ignored): the save throws Error(Io), the old file survives, no temp file stays.
TEST_F(SafeTensors, FailedWriteKeepsOldFileAndRemovesTemp) {
  const std::string p = path("full.safetensors");
  save_safetensors(p, {{"old", Tensor::from_vector(std::vector<float>{1, 2}, {2})}});
  const std::string before = read_bytes(p);
  const Tensor big = Tensor::zeros({1 << 18});  // 1 MiB

  const std::string msg = io_error_past_file_limit([&] { save_safetensors(p, {{"new", big}}); });
  EXPECT_FALSE(msg.empty()) << "no Error(Io)";
  EXPECT_NE(msg.find("write failed"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
  EXPECT_EQ(SafeTensorsFile::open(p).load("old").to_vector<float>(), (std::vector<float>{1, 2}));
}

// A writer killed mid-write leaves "<path>.tmp.<pid>"; the next write of that path removes it,
// and leaves alone a live process's temp file (another writer's save in progress).
TEST_F(SafeTensors, NextWriteRemovesTheTempFilesOfDeadWriters) {
  const std::string p = path("model.safetensors");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // now a pid without a process
  const std::string dead = p + ".tmp." + std::to_string(child);
  const std::string live = p + ".tmp." + std::to_string(::getppid());
  const std::string other = path("other.safetensors.tmp." + std::to_string(child));
  for (const std::string& f : {dead, live, other}) std::ofstream(f) << "partial";
  save_safetensors(p, {{"x", Tensor::from_vector(std::vector<float>{1}, {1})}});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));  // another file's temp: not this write's business
  EXPECT_EQ(SafeTensorsFile::open(p).load("x").to_vector<float>(), (std::vector<float>{1}));
}
