// What the tokenizer test files share (test_tokenizer.cpp, test_tokenizer_errors.cpp): the
// real GPT-2 files (tests needing them skip without them, except under CI=true), files and
// folders for a test, GPT-2's byte-level alphabet, random texts, and an error check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ci.h"
#include "forge/error.h"
#include "forge/tokenizer.h"

namespace fs = std::filesystem;
using forge::Error;
using forge::ErrorKind;
using forge::StreamDecoder;
using forge::Tokenizer;
using Json = nlohmann::json;
using Ids = std::vector<uint32_t>;

inline const std::string kRealDir = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";
inline const std::string kCasesPath = FORGE_SOURCE_DIR "/tests/data/tokenizer_cases.json";
inline const std::string kGoldenPath = FORGE_SOURCE_DIR "/tests/data/tokenizer_golden.json";

using forge::test::under_ci;

inline bool real_files_present() {
  return fs::exists(kRealDir + "/encoder.json") && fs::exists(kRealDir + "/vocab.bpe");
}

#define REQUIRE_REAL_FILES()                                                            \
  do {                                                                                  \
    if (!real_files_present()) {                                                        \
      if (under_ci()) FAIL() << "GPT-2 tokenizer files missing under CI: " << kRealDir; \
      GTEST_SKIP() << "GPT-2 tokenizer files missing; run scripts/fetch_tokenizer.sh";  \
    }                                                                                   \
  } while (0)

inline const Tokenizer& real() {
  static const Tokenizer tok = Tokenizer::load(kRealDir);
  return tok;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_text(const fs::path& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
}

inline std::vector<std::string> cases() {
  std::vector<std::string> out;
  for (const Json& c : Json::parse(read_text(kCasesPath))) out.push_back(c.get<std::string>());
  return out;
}

// A fresh, empty folder for one test.
inline fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("forge_tok_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// GPT-2's bytes_to_unicode, written again here so that the tests do not trust src/text/.
inline std::string byte_level(std::string_view bytes) {
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  std::string out;
  for (char ch : bytes) {
    const int b = static_cast<uint8_t>(ch);
    int cp = b;
    if (!printable(b)) {
      cp = 256;
      for (int x = 0; x < b; ++x) cp += !printable(x);
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      n = 1, cp = c;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += n;
  }
  return true;
}

// Random strings from characters that stress the split regex (see tools/golden_tokenizer.py).
inline std::vector<std::string> fuzz_texts(size_t count, uint32_t seed) {
  static const std::vector<std::string> pool = {
      "a",          "b",      "c",      "X",      "Y",      "Z",
      "0",          "1",      "9",      " ",      " ",      "'",
      "'s",         "'S",     "'re",    "'RE",    "'ll",    "'d",
      "'m",         "'t",     "'ve",    "\t",     "\n",     "\r",
      "\r\n",       "\n\n",   "  ",     "\x0b",   "\x0c",   "\x1c",
      "\x1f",       "\u0085", "\u00a0", "\u1680", "\u180e", "\u2000",
      "\u2009",     "\u200a", "\u200b", "\u2028", "\u2029", "\u202f",
      "\u205f",     "\u3000", "\ufeff", ".",      ",",      ";",
      "!",          "?",      "-",      "_",      "(",      ")",
      "[",          "{",      "<",      ">",      "/",      "\\",
      "|",          "@",      "#",      "$",      "%",      "&",
      "*",          "+",      "=",      "~",      "`",      "\"",
      "é",          "Å",      "ß",      "œ",      "ǅ",      "ʰ",
      "\u0301",     "Ω",      "Ж",      "א",      "ع",      "क",
      "\u093f",     "ก",      "日",     "本",     "한",     "٣",
      "३",          "Ⅻ",      "²",      "½",      "😀",      "👍",
      "\U0001F3FD", "\u200d", "\ufe0f", "🇺🇸",     "\ue000", "<|endoftext|>",
      "<|",         "|>"};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    std::string s;
    const size_t len = 1 + rng() % 24;
    for (size_t k = 0; k < len; ++k) s += pool[rng() % pool.size()];
    out.push_back(s);
  }
  return out;
}

// Runs f and checks that it throws a Tokenizer error whose message starts with `prefix` and
// contains `needle`.
template <typename F>
inline void expect_error(F&& f, const std::string& prefix, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Tokenizer) << what;
    EXPECT_EQ(what.rfind(prefix, 0), 0u) << "message: " << what << "\nexpected prefix: " << prefix;
    EXPECT_NE(what.find(needle), std::string::npos) << "message: " << what;
  }
}

// ---- small synthetic vocabularies, with ids that are easy to compute by hand ----------------
// Ids 0..255 are the bytes in byte order (unlike GPT-2's order), then one id per merge.
struct Synthetic {
  Json vocab = Json::object();
  std::vector<std::string> merge_lines;
  uint32_t next = 256;

  Synthetic() {
    for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  }
  // Adds the merge left + right; returns the merged token's id.
  uint32_t merge(const std::string& left, const std::string& right) {
    merge_lines.push_back(byte_level(left) + " " + byte_level(right));
    const std::string merged = byte_level(left + right);
    if (!vocab.contains(merged)) vocab[merged] = next++;
    return vocab[merged].get<uint32_t>();
  }
  uint32_t add_eot() {
    vocab["<|endoftext|>"] = next;
    return next++;
  }
  std::string merges_txt() const {
    std::string s = "#version: 0.2\n";
    for (const auto& l : merge_lines) s += l + "\n";
    return s;
  }
  fs::path write(const std::string& name) const {
    const fs::path dir = temp_dir(name);
    write_text(dir / "vocab.json", vocab.dump());
    write_text(dir / "merges.txt", merges_txt());
    return dir;
  }
  Tokenizer load(const std::string& name) const { return Tokenizer::load(write(name).string()); }
};

inline uint32_t b(char c) { return static_cast<uint8_t>(c); }
