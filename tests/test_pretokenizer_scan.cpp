// The pre-tokenizer without PCRE2 (src/text/pretokenizer_scan.cpp, the wasm build's) against
// PCRE2's regex (the native build's): the same character classes on every code point, and the
// same pieces on the tokenizer golden strings and on random text full of edge cases.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "text/pretokenizer_scan.h"
#include "text/tokenizer_impl.h"
#include "text/utf8_encode.h"

namespace {

using forge::text::CharClass;

// The pieces of `text` as PCRE2 splits it (the native Pretokenizer), "valid" ones marked.
std::vector<std::pair<std::string, bool>> pcre2_pieces(std::string_view text) {
  static const forge::text::Pretokenizer pre;
  std::vector<std::pair<std::string, bool>> out;
  pre.split(text, [&](std::string_view piece, bool valid) { out.emplace_back(piece, valid); });
  return out;
}

// The same split made with the scanner.
std::vector<std::pair<std::string, bool>> scanner_pieces(std::string_view text) {
  std::vector<std::pair<std::string, bool>> out;
  size_t offset = 0;
  while (offset < text.size()) {
    size_t begin = 0, end = 0;
    if (!forge::text::scan_gpt2_piece(text, offset, begin, end)) {
      out.emplace_back(text.substr(offset), false);
      break;
    }
    if (begin > offset) out.emplace_back(text.substr(offset, begin - offset), false);
    out.emplace_back(text.substr(begin, end - begin), true);
    offset = end;
  }
  return out;
}

TEST(PretokenizerScan, ClassesMatchPcre2EveryCodePoint) {
  // One anchored match per code point says its class: letter, number, space (the pattern's
  // White_Space set, as src/text/pretokenizer.cpp spells it) or other.
  const char* pattern =
      "(\\p{L})|(\\p{N})|([\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
      "\\x{2029}\\x{202F}\\x{205F}\\x{3000}])";
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
  ASSERT_NE(re, nullptr);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  int mismatches = 0;
  for (uint32_t cp = 0; cp <= 0x10FFFF && mismatches < 10; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = forge::text::utf8_encode(cp);
    const int rc =
        pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
    CharClass want = CharClass::Other;
    if (rc == 2) want = CharClass::Letter;
    if (rc == 3) want = CharClass::Number;
    if (rc == 4) want = CharClass::Space;
    if (forge::text::char_class(cp) != want) {
      ++mismatches;
      ADD_FAILURE() << "U+" << std::hex << cp << ": scanner class "
                    << static_cast<int>(forge::text::char_class(cp)) << ", PCRE2 "
                    << static_cast<int>(want)
                    << " (PCRE2's Unicode tables changed? run tools/unicode/gen_classes.sh)";
    }
  }
  pcre2_match_data_free(md);
  pcre2_code_free(re);
}

TEST(PretokenizerScan, SamePiecesAsPcre2OnTheGoldenStrings) {
  std::ifstream f(FORGE_SOURCE_DIR "/tests/data/tokenizer_golden.json");
  ASSERT_TRUE(f) << "tests/data/tokenizer_golden.json";
  const auto cases = nlohmann::json::parse(f);
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(scanner_pieces(text), pcre2_pieces(text)) << text;
  }
}

TEST(PretokenizerScan, SamePiecesAsPcre2OnRandomText) {
  // Pieces chosen for the pattern's edges: each class in several scripts, every White_Space
  // character and U+180E (not one), contractions and near-contractions, combining marks,
  // emoji, and invalid UTF-8 (lone continuation, truncated, overlong, surrogate, > U+10FFFF,
  // F5..FF).
  const std::vector<std::string> atoms = {"a",
                                          "Z",
                                          "é",
                                          "ß",
                                          "Ж",
                                          "中",
                                          "ʰ",
                                          "ǅ",
                                          "1",
                                          "٣",
                                          "²",
                                          "Ⅻ",
                                          "½",
                                          ".",
                                          ",",
                                          "!",
                                          "-",
                                          "'",
                                          "\"",
                                          "s",
                                          "t",
                                          "re",
                                          "ve",
                                          "m",
                                          "ll",
                                          "d",
                                          "S",
                                          "'s",
                                          "'LL",
                                          "😀",
                                          "👍🏽",
                                          "\u0301",
                                          "\u200d",
                                          "€",
                                          "\t",
                                          "\n",
                                          "\r\n",
                                          "\v",
                                          "\f",
                                          " ",
                                          "  ",
                                          "\u0085",
                                          "\u00a0",
                                          "\u1680",
                                          "\u2003",
                                          "\u200a",
                                          "\u2028",
                                          "\u2029",
                                          "\u202f",
                                          "\u205f",
                                          "\u3000",
                                          "\u180e",
                                          "\u200b",
                                          "\x80",
                                          "\xbf",
                                          "\xe2\x82",
                                          "\xc0\xaf",
                                          "\xed\xa0\x80",
                                          "\xf4\x90\x80\x80",
                                          "\xff",
                                          "\xc3",
                                          "\xf0\x9f\x98",
                                          "<|endoftext|>"};
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> pick(0, atoms.size() - 1), len(0, 24);
  int failures = 0;
  for (int i = 0; i < 20000 && failures < 5; ++i) {
    std::string text;
    for (size_t n = len(rng); n > 0; --n) text += atoms[pick(rng)];
    const auto want = pcre2_pieces(text);
    const auto got = scanner_pieces(text);
    if (got != want) {
      ++failures;
      std::string hex;
      for (unsigned char ch : text) hex += " " + std::to_string(ch);
      ADD_FAILURE() << "text bytes:" << hex;
    }
  }
}

}  // namespace
