// Helpers shared by the data and char-tokenizer tests: scratch folders, whole-file I/O,
// error checks, and the GPT-2 tokenizer files (skipped when absent, required under CI).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "forge/error.h"

namespace forge::testutil {

inline const std::string kGpt2Dir = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";

inline bool gpt2_files_present() {
  return std::filesystem::exists(kGpt2Dir + "/encoder.json") &&
         std::filesystem::exists(kGpt2Dir + "/vocab.bpe");
}

#define FORGE_REQUIRE_GPT2_FILES()                                                     \
  do {                                                                                 \
    if (!forge::testutil::gpt2_files_present()) {                                      \
      const char* ci = std::getenv("CI");                                              \
      if (ci && std::string(ci) == "true")                                             \
        FAIL() << "GPT-2 tokenizer files missing: " << forge::testutil::kGpt2Dir;      \
      GTEST_SKIP() << "GPT-2 tokenizer files missing; run scripts/fetch_tokenizer.sh"; \
    }                                                                                  \
  } while (0)

/// A new, empty folder under the temp folder, unique to this process and `name`.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("forge_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// f() must throw forge::Error of `kind` whose message contains `needle`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace forge::testutil
