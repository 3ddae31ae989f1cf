// What the safetensors test files share (test_safetensors.cpp, test_safetensors_errors.cpp):
// a fresh folder per test, raw file bytes, header-level file building, and error checks
// that the message names the file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "forge/backend.h"
#include "forge/error.h"
#include "file_test_util.h"
#include "forge/safetensors.h"

namespace forge::test {

namespace fs = std::filesystem;

// A fresh, empty folder per test, removed afterwards.
class SafeTensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("forge_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file from a header text (used as is: no padding, so that tests control every byte) and
// a data buffer.
inline std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

inline std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

// Expects open() to throw Error of `kind` whose message names the file and contains `what`.
inline void expect_open_error(const std::string& path, ErrorKind kind, const std::string& what) {
  try {
    SafeTensorsFile::open(path);
    ADD_FAILURE() << "opened without error; expected: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("safetensors: " + path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nwanted: " << what;
  }
}

inline void expect_dir_error(const std::string& path, ErrorKind kind, const std::string& what) {
  try {
    TensorDirectory::open(path);
    ADD_FAILURE() << "opened without error; expected: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("safetensors: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nwanted: " << what;
  }
}

// Random F32 values, deterministic per seed.
inline std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline Tensor raw16(const std::vector<uint16_t>& bits, DType dt) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bits.size())}, dt);
  backend_for(Device::cpu()).write(*t.storage(), 0, bits.data(), bits.size() * 2);
  return t;
}

}  // namespace forge::test
