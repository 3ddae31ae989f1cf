// Tests of the GPT-2 tokenizer. References: ids published for GPT-2, golden ids made with HF
// transformers + tiktoken (tests/data/tokenizer_golden.json, tools/golden_tokenizer.py), an
// independent Python port of OpenAI's encoder (tests/python/gpt2_encoder_ref.py), a reference
// BPE written here from GPT-2's description, and hand-computed ids on small synthetic vocabs.
// Tests that need the real files (scripts/fetch_tokenizer.sh) skip without them, except
// under CI=true, where they fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ci.h"
#include "forge/error.h"
#include "forge/threads.h"
#include "forge/tokenizer.h"
#include "pyref.h"
#include "text/tokenizer_impl.h"

namespace fs = std::filesystem;
using forge::Error;
using forge::ErrorKind;
using forge::StreamDecoder;
using forge::Tokenizer;
using Json = nlohmann::json;
using Ids = std::vector<uint32_t>;

namespace {

const std::string kRealDir = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";
const std::string kCasesPath = FORGE_SOURCE_DIR "/tests/data/tokenizer_cases.json";
const std::string kGoldenPath = FORGE_SOURCE_DIR "/tests/data/tokenizer_golden.json";

using forge::test::under_ci;

bool real_files_present() {
  return fs::exists(kRealDir + "/encoder.json") && fs::exists(kRealDir + "/vocab.bpe");
}

#define REQUIRE_REAL_FILES()                                                            \
  do {                                                                                  \
    if (!real_files_present()) {                                                        \
      if (under_ci()) FAIL() << "GPT-2 tokenizer files missing under CI: " << kRealDir; \
      GTEST_SKIP() << "GPT-2 tokenizer files missing; run scripts/fetch_tokenizer.sh";  \
    }                                                                                   \
  } while (0)

const Tokenizer& real() {
  static const Tokenizer tok = Tokenizer::load(kRealDir);
  return tok;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
}

std::vector<std::string> cases() {
  std::vector<std::string> out;
  for (const Json& c : Json::parse(read_text(kCasesPath))) out.push_back(c.get<std::string>());
  return out;
}

// A fresh, empty folder for one test.
fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("forge_tok_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// GPT-2's bytes_to_unicode, written again here so that the tests do not trust src/text/.
std::string byte_level(std::string_view bytes) {
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

bool valid_utf8(std::string_view s) {
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
std::vector<std::string> fuzz_texts(size_t count, uint32_t seed) {
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
void expect_error(F&& f, const std::string& prefix, const std::string& needle) {
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

uint32_t b(char c) { return static_cast<uint8_t>(c); }

// ---- the reference BPE: GPT-2's encoder.py algorithm, on byte-level strings -------------------
class ReferenceBpe {
 public:
  explicit ReferenceBpe(const std::string& dir) {
    const Json vocab = Json::parse(read_text(dir + "/encoder.json"));
    for (const auto& [token, id] : vocab.items()) vocab_[token] = id.get<uint32_t>();
    std::istringstream merges(read_text(dir + "/vocab.bpe"));
    std::string line;
    std::getline(merges, line);  // #version
    int rank = 0;
    while (std::getline(merges, line)) {
      const size_t sp = line.find(' ');
      if (sp != std::string::npos) ranks_[{line.substr(0, sp), line.substr(sp + 1)}] = rank++;
    }
  }

  // The ids of one pre-tokenized piece: merge every occurrence of the lowest-ranked pair, repeat.
  Ids encode_piece(std::string_view bytes) const {
    std::vector<std::string> syms;
    for (char c : bytes) syms.push_back(byte_level(std::string(1, c)));
    while (syms.size() > 1) {
      int best = -1;
      std::pair<std::string, std::string> best_pair;
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        auto it = ranks_.find({syms[i], syms[i + 1]});
        if (it != ranks_.end() && (best < 0 || it->second < best))
          best = it->second, best_pair = it->first;
      }
      if (best < 0) break;
      std::vector<std::string> merged;
      for (size_t i = 0; i < syms.size();) {
        if (i + 1 < syms.size() && syms[i] == best_pair.first && syms[i + 1] == best_pair.second) {
          merged.push_back(syms[i] + syms[i + 1]);
          i += 2;
        } else {
          merged.push_back(syms[i++]);
        }
      }
      syms = std::move(merged);
    }
    Ids ids;
    for (const auto& s : syms) ids.push_back(vocab_.at(s));
    return ids;
  }

 private:
  std::map<std::string, uint32_t> vocab_;
  std::map<std::pair<std::string, std::string>, int> ranks_;
};

}  // namespace

// ================================ the real GPT-2 files ===========================================

TEST(Tokenizer, KnownIds) {
  REQUIRE_REAL_FILES();
  const Tokenizer& tok = real();
  EXPECT_EQ(tok.encode("Hello, my dog is cute"), (Ids{15496, 11, 616, 3290, 318, 13779}));
  EXPECT_EQ(tok.encode("hello world"), (Ids{31373, 995}));
  EXPECT_EQ(tok.vocab_size(), 50257u);
  EXPECT_EQ(tok.eot_id(), 50256);
  EXPECT_EQ(tok.special_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok.special_id("<|nope|>"), -1);
  EXPECT_EQ(tok.decode(Ids{15496, 11, 616, 3290, 318, 13779}), "Hello, my dog is cute");
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Tokenizer, EndOfTextIsSplitOutFirst) {
  REQUIRE_REAL_FILES();
  const Tokenizer& tok = real();
  const Ids a = tok.encode("a"), bb = tok.encode("b");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(tok.encode("a<|endoftext|>b"), (Ids{a[0], 50256, bb[0]}));
  EXPECT_EQ(tok.encode("<|endoftext|><|endoftext|>"), (Ids{50256, 50256}));
  EXPECT_EQ(tok.decode(Ids{50256}), "<|endoftext|>");
  // encode_ordinary treats it as text: "<|", "endoftext", "|>".
  const Ids plain = tok.encode_ordinary("<|endoftext|>");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256u), 0);
  EXPECT_EQ(tok.decode(plain), "<|endoftext|>");
}

TEST(Tokenizer, MatchesHfGolden) {
  REQUIRE_REAL_FILES();
  if (!fs::exists(kGoldenPath))
    FORGE_SKIP_UNLESS_CI(kGoldenPath << " missing: make it with tools/golden_tokenizer.py");
  const Json golden = Json::parse(read_text(kGoldenPath));
  ASSERT_GT(golden.size(), 50u);
  size_t bad = 0;
  for (const Json& g : golden) {
    const std::string text = g["text"].get<std::string>();
    const Ids want = g["ids"].get<Ids>();
    const Ids got = real().encode(text);
    if (got != want && ++bad <= 5)
      ADD_FAILURE() << "text " << Json(text).dump() << "\n  want " << Json(want).dump()
                    << "\n  got  " << Json(got).dump();
    EXPECT_EQ(real().decode(got), text);
  }
  EXPECT_EQ(bad, 0u) << "of " << golden.size() << " golden texts";
}

TEST(Tokenizer, MatchesIndependentPythonEncoder) {
  REQUIRE_REAL_FILES();
  FORGE_REQUIRE_TORCH();  // the same Python; the script itself needs the `regex` module
  if (std::system("/usr/bin/python3 -c 'import regex' > /dev/null 2>&1") != 0) {
    if (under_ci()) FAIL() << "python3-regex missing under CI";
    GTEST_SKIP() << "python3-regex not installed (scripts/setup.sh installs it)";
  }
  std::vector<std::string> texts = cases();
  for (auto& t : fuzz_texts(1500, 7)) texts.push_back(t);
  const Json out =
      forge::test::run_python("gpt2_encoder_ref.py", Json{{"dir", kRealDir}, {"texts", texts}});
  ASSERT_EQ(out["ids"].size(), texts.size());
  size_t bad = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids want = out["ids"][i].get<Ids>();
    const Ids got = real().encode(texts[i]);
    if (got != want && ++bad <= 5)
      ADD_FAILURE() << "text " << Json(texts[i]).dump() << "\n  want " << Json(want).dump()
                    << "\n  got  " << Json(got).dump();
  }
  EXPECT_EQ(bad, 0u) << "of " << texts.size() << " texts";
}

TEST(Tokenizer, LongWordsMatchReferenceBpe) {
  // Pieces longer than 16 bytes take the heap path; " " + letters is always one piece.
  REQUIRE_REAL_FILES();
  const ReferenceBpe ref(kRealDir);
  std::mt19937 rng(3);
  const std::string letters = "abcdefghijklmnopqrstuvwxyzeeeaaoiinnsstt";
  for (int i = 0; i < 300; ++i) {
    std::string word = i % 2 ? " " : "";
    const size_t len = 5 + rng() % (i < 150 ? 30 : 300);
    for (size_t k = 0; k < len; ++k) word += letters[rng() % letters.size()];
    ASSERT_EQ(real().encode(word), ref.encode_piece(word)) << word;
  }
}

TEST(Tokenizer, ScanAndHeapMergesAgree) {
  // The two merge strategies on the same bytes, including pieces that are not valid UTF-8 and
  // could never reach BPE whole; both must give the same ids as the reference.
  REQUIRE_REAL_FILES();
  std::vector<std::pair<std::string, int64_t>> vocab;
  const Json encoder = Json::parse(read_text(kRealDir + "/encoder.json"));
  for (const auto& [token, id] : encoder.items()) vocab.emplace_back(token, id.get<int64_t>());
  std::vector<forge::text::MergeRule> merges;
  std::istringstream in(read_text(kRealDir + "/vocab.bpe"));
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const size_t sp = line.find(' ');
    if (n > 1 && sp != std::string::npos)
      merges.push_back({line.substr(0, sp), line.substr(sp + 1), n});
  }
  const auto impl = Tokenizer::Impl::build("encoder.json", vocab, "vocab.bpe", merges,
                                           {{"<|endoftext|>", 50256}});
  const ReferenceBpe ref(kRealDir);
  std::mt19937 rng(11);
  const std::string alphabet = "etaoin shrdlu\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80.,'0123";
  for (int i = 0; i < 400; ++i) {
    std::string piece;
    const size_t len = 1 + rng() % 64;
    for (size_t k = 0; k < len; ++k) piece += alphabet[rng() % alphabet.size()];
    Ids scan, heap;
    forge::text::bpe_merge_scan(impl->merges, impl->byte_ids, piece, scan);
    forge::text::bpe_merge_heap(impl->merges, impl->byte_ids, piece, heap);
    ASSERT_EQ(scan, heap) << Json::binary({piece.begin(), piece.end()}).dump();
    ASSERT_EQ(scan, ref.encode_piece(piece));
  }
}

TEST(Tokenizer, RoundTripsText) {
  REQUIRE_REAL_FILES();
  std::vector<std::string> texts = cases();
  for (auto& t : fuzz_texts(300, 5)) texts.push_back(t);
  for (const char* s : {"\t\t  \t", "trailing\t", "\r\n\r\n", "x\r", "'", "''''", "'S'S'S",
                        "0"
                        "123456789012345678901234567890",
                        "   ", "a  b   c    d"})
    texts.push_back(s);
  for (const std::string& t : texts) {
    const Ids ids = real().encode(t);
    for (uint32_t id : ids) ASSERT_LT(id, real().vocab_size());
    EXPECT_EQ(real().decode(ids), t) << Json(t).dump();
  }
}

TEST(Tokenizer, InvalidUtf8BytesBecomeByteTokens) {
  REQUIRE_REAL_FILES();
  const Json vocab = Json::parse(read_text(kRealDir + "/encoder.json"));
  auto byte_id = [&](char c) { return vocab.at(byte_level(std::string(1, c))).get<uint32_t>(); };
  const Ids a = real().encode("a"), bb = real().encode("b");
  // A lone continuation byte, a stray lead byte, bytes that never occur in UTF-8, a truncated
  // 4-byte character, an overlong '/', an encoded surrogate.
  for (const std::string bad :
       {"\x80", "\xc3", "\xff", "\xfe", "\xf0\x9f\x98", "\xc0\xaf", "\xed\xa0\x80"}) {
    Ids want = a;
    for (char c : bad) want.push_back(byte_id(c));
    want.push_back(bb[0]);
    EXPECT_EQ(real().encode("a" + bad + "b"), want) << Json::binary({bad.begin(), bad.end()});
  }
  // Any bytes at all round-trip.
  std::mt19937 rng(1);
  for (int i = 0; i < 500; ++i) {
    std::string s(rng() % 80, '\0');
    for (char& c : s) c = static_cast<char>(i % 2 ? rng() % 256 : 0x80 + rng() % 128);
    EXPECT_EQ(real().decode(real().encode(s)), s);
  }
}

TEST(Tokenizer, HugeInputsStayLinear) {
  // Long runs hit the regex's backtracking (\s+(?!\S)) and BPE's worst case (one 1 MB piece);
  // these must finish quickly and give the text back, not blow the stack or go quadratic.
  REQUIRE_REAL_FILES();
  for (const char* unit : {" ", "a", "\xff", "'", "1", "\n", "\xe6\x97\xa5", " \n", "ab "}) {
    std::string s;
    while (s.size() < (1u << 20)) s += unit;
    const Ids ids = real().encode(s);
    EXPECT_EQ(real().decode(ids), s) << unit;
  }
}

TEST(Tokenizer, ParallelEncodeMatchesSerial) {
  REQUIRE_REAL_FILES();
  std::string text;
  const auto cs = cases();
  for (int rep = 0; text.size() < (3u << 20); ++rep)
    for (const auto& c : cs) text += c + (rep % 2 ? "\n" : "\nX");
  const int saved = forge::num_threads();
  forge::set_num_threads(1);
  const Ids serial = real().encode(text);
  forge::set_num_threads(4);
  const Ids parallel = real().encode(text);
  forge::set_num_threads(saved);
  EXPECT_EQ(serial, parallel);
  EXPECT_EQ(real().decode(parallel), text);
}

TEST(Tokenizer, AllFileLayoutsGiveTheSameIds) {
  REQUIRE_REAL_FILES();
  const std::string encoder = read_text(kRealDir + "/encoder.json");
  const std::string bpe = read_text(kRealDir + "/vocab.bpe");

  const fs::path hf = temp_dir("layout_hf");
  write_text(hf / "vocab.json", encoder);
  write_text(hf / "merges.txt", bpe);

  // tokenizer.json, once with "left right" merges and once with [left, right] pairs.
  Json strings = Json::array(), pairs = Json::array();
  std::istringstream in(bpe);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    strings.push_back(line);
    pairs.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  auto tokenizer_json = [&](const Json& merges) {
    return Json{
        {"version", "1.0"},
        {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
        {"model", {{"type", "BPE"}, {"vocab", Json::parse(encoder)}, {"merges", merges}}}}
        .dump();
  };
  const fs::path tj = temp_dir("layout_tj");
  write_text(tj / "tokenizer.json", tokenizer_json(strings));
  // tokenizer.json wins over the other files when a folder has both (broken ones here).
  write_text(tj / "vocab.json", "not json");
  const fs::path tj2 = temp_dir("layout_tj_pairs");
  write_text(tj2 / "tokenizer.json", tokenizer_json(pairs));

  const std::vector<Tokenizer> layouts = {
      Tokenizer::load(hf.string()), Tokenizer::load(tj.string()),
      Tokenizer::load((tj2 / "tokenizer.json").string()),
      Tokenizer::from_vocab_merges((hf / "vocab.json").string(), (hf / "merges.txt").string()),
      Tokenizer::from_tokenizer_json((tj / "tokenizer.json").string())};
  std::vector<std::string> texts = cases();
  for (auto& t : fuzz_texts(100, 9)) texts.push_back(t);
  for (const Tokenizer& t : layouts) {
    EXPECT_EQ(t.vocab_size(), 50257u);
    EXPECT_EQ(t.eot_id(), 50256);
    for (const auto& text : texts) ASSERT_EQ(t.encode(text), real().encode(text)) << text;
  }
}

// ================================ synthetic vocabularies =========================================

TEST(TokenizerBpe, LowestRankMergesFirst) {
  Synthetic s1;
  const uint32_t bc = s1.merge("b", "c");
  const uint32_t ab1 = s1.merge("a", "b");
  EXPECT_EQ(s1.load("rank1").encode("abc"), (Ids{b('a'), bc}));
  EXPECT_EQ(s1.load("rank1b").encode("ab"), (Ids{ab1}));

  Synthetic s2;
  const uint32_t ab = s2.merge("a", "b");
  s2.merge("b", "c");
  const uint32_t abc = s2.merge("ab", "c");
  EXPECT_EQ(s2.load("rank2").encode("abc"), (Ids{abc}));
  EXPECT_EQ(s2.load("rank2b").encode("abab"), (Ids{ab, ab}));
}

TEST(TokenizerBpe, TiesMergeLeftmostFirst) {
  Synthetic s;
  const uint32_t aa = s.merge("a", "a");
  const Tokenizer t = s.load("ties");
  EXPECT_EQ(t.encode("aaa"), (Ids{aa, b('a')}));
  EXPECT_EQ(t.encode("aaaa"), (Ids{aa, aa}));
  EXPECT_EQ(t.encode("aaaaa"), (Ids{aa, aa, b('a')}));
  // The same on the heap path (pieces over 16 bytes): 41 a's → 20 "aa" and a trailing "a".
  Ids want(20, aa);
  want.push_back(b('a'));
  EXPECT_EQ(t.encode(std::string(41, 'a')), want);

  Synthetic s4;
  s4.merge("a", "a");
  const uint32_t a4 = s4.merge("aa", "aa");
  const Tokenizer t4 = s4.load("ties4");
  EXPECT_EQ(t4.encode(std::string(40, 'a')), Ids(10, a4));
  EXPECT_EQ(t4.encode(std::string(8, 'a')), Ids(2, a4));
}

TEST(TokenizerBpe, RegexPiecesNeverMerge) {
  Synthetic s;
  const uint32_t ab = s.merge("a", "b");
  const uint32_t sp_a = s.merge(" ", "a");
  s.merge("b", " ");  // "b " always spans two pieces, so it can never apply
  const uint32_t q_s = s.merge("'", "s");
  s.merge("'", "S");
  const Tokenizer t = s.load("pieces");
  // "ab ab" is "ab" + " ab"; inside " ab", (a, b) has the lower rank, so " a" never forms.
  EXPECT_EQ(t.encode("ab ab"), (Ids{ab, b(' '), ab}));
  EXPECT_EQ(t.encode(" a"), (Ids{sp_a}));
  EXPECT_EQ(t.encode("b b"), (Ids{b('b'), b(' '), b('b')}));
  // Contractions are case-sensitive: "'s" is one piece, "'S" is punctuation then a letter.
  EXPECT_EQ(t.encode("a's"), (Ids{b('a'), q_s}));
  EXPECT_EQ(t.encode("a'S"), (Ids{b('a'), b('\''), b('S')}));
  EXPECT_EQ(t.decode(t.encode("I'S 's  x\r\n")), "I'S 's  x\r\n");
}

TEST(TokenizerBpe, SpecialTokensAndVersionlessMerges) {
  Synthetic s;
  const uint32_t ab = s.merge("a", "b");
  const uint32_t eot = s.add_eot();
  const fs::path dir = s.write("special");
  write_text(dir / "merges.txt", byte_level("a") + " " + byte_level("b") + "\r\n");  // no #version
  const Tokenizer t = Tokenizer::load(dir.string());
  EXPECT_EQ(t.eot_id(), eot);
  EXPECT_EQ(t.vocab_size(), eot + 1);
  EXPECT_EQ(t.encode("ab<|endoftext|>ab"), (Ids{ab, eot, ab}));
  EXPECT_EQ(t.encode("<|endoftext"), t.encode_ordinary("<|endoftext"));
}

TEST(TokenizerBpe, AddedTokensInTokenizerJson) {
  // Added tokens hold raw text (not byte-level) and are split out longest-first.
  Synthetic s;
  const uint32_t ab = s.merge("a", "b");
  Json added = Json::array();
  added.push_back({{"id", 258}, {"content", "<x>"}, {"special", true}});
  added.push_back({{"id", 259}, {"content", "<x>y"}, {"special", true}});
  added.push_back({{"id", 260}, {"content", "é é"}, {"special", false}});
  const fs::path dir = temp_dir("added");
  write_text(dir / "tokenizer.json",
             Json{{"added_tokens", added},
                  {"model", {{"type", "BPE"}, {"vocab", s.vocab}, {"merges", s.merge_lines}}}}
                 .dump());
  // Ids must be dense: vocab 0..256 and added 258..260 leave 257 out, so 260 is one too many.
  expect_error([&] { Tokenizer::load(dir.string()); },
               "tokenizer: " + (dir / "tokenizer.json").string(), "ids must be 0..259");
  s.vocab[byte_level("zz")] = 257;
  write_text(dir / "tokenizer.json",
             Json{{"added_tokens", added},
                  {"model", {{"type", "BPE"}, {"vocab", s.vocab}, {"merges", s.merge_lines}}}}
                 .dump());
  const Tokenizer t = Tokenizer::load(dir.string());
  EXPECT_EQ(t.encode("ab<x>ab<x>y<x>é é"), (Ids{ab, 258, ab, 259, 258, 260}));
  EXPECT_EQ(t.decode(Ids{260, 259}), "é é<x>y");
  EXPECT_EQ(t.special_id("<x>y"), 259);
}

TEST(StreamDecoder, HoldsBackIncompleteCharacters) {
  Synthetic s;  // every byte is its own token, so each push adds exactly one byte
  StreamDecoder d(s.load("stream"));
  EXPECT_EQ(d.push(0xC3), "");
  EXPECT_EQ(d.push(0xA9), "é");
  const std::string emoji = "\xf0\x9f\x98\x80";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d.push(static_cast<uint8_t>(emoji[i])), "");
  EXPECT_EQ(d.push(static_cast<uint8_t>(emoji[3])), emoji);
  EXPECT_EQ(d.push('x'), "x");
  // Bytes that cannot become valid UTF-8 pass straight through.
  EXPECT_EQ(d.push(0xFF), "\xff");
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push('a'),
            "\xe2"
            "a");
  EXPECT_EQ(d.push(0xE0), "");
  EXPECT_EQ(d.push(0x80), "\xe0\x80");  // overlong: E0 needs A0..BF next
  EXPECT_EQ(d.push(0xED), "");
  EXPECT_EQ(d.push(0xA0), "\xed\xa0");  // a surrogate
  EXPECT_EQ(d.push(0xF4), "");
  EXPECT_EQ(d.push(0x90), "\xf4\x90");  // beyond U+10FFFF
  EXPECT_EQ(d.push(0x80), "\x80");      // a lone continuation byte
  // A bad id changes nothing; flush returns what is held back.
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push(0x82), "");
  expect_error([&] { d.push(100000); }, "tokenizer: decode", "out of range");
  EXPECT_EQ(d.push(0xAC), "€");
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.flush(), "\xe2");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, RealTokensSplitCharacters) {
  REQUIRE_REAL_FILES();
  std::vector<std::string> texts = {
      "emoji 😀 family 👨‍👩‍👧‍👦 thumbs 👍🏽 日本語 한국어 é",
      "<|endoftext|>x🇺🇸"};
  for (auto& t : cases()) texts.push_back(t);
  size_t held_back = 0;
  for (const std::string& text : texts) {
    StreamDecoder d(real());
    std::string joined;
    for (uint32_t id : real().encode(text)) {
      const std::string piece = d.push(id);
      EXPECT_TRUE(valid_utf8(piece)) << Json(text).dump();
      held_back += piece.empty();
      joined += piece;
    }
    joined += d.flush();
    EXPECT_EQ(joined, text);
  }
  EXPECT_GT(held_back, 10u);  // many characters did span tokens
}

// ================================ errors =========================================================

TEST(TokenizerErrors, MissingFiles) {
  const fs::path dir = temp_dir("missing");
  expect_error([&] { Tokenizer::load((dir / "nope").string()); },
               "tokenizer: " + (dir / "nope").string(), "no such file or folder");
  expect_error([&] { Tokenizer::load(dir.string()); }, "tokenizer: " + dir.string(),
               "no tokenizer files");
  write_text(dir / "vocab.json", "{}");
  expect_error([&] { Tokenizer::load(dir.string()); },
               "tokenizer: " + (dir / "merges.txt").string(), "no such file");
  fs::remove(dir / "vocab.json");
  write_text(dir / "vocab.bpe", "");
  expect_error([&] { Tokenizer::load(dir.string()); },
               "tokenizer: " + (dir / "encoder.json").string(), "no such file");
  write_text(dir / "weights.bin", "xx");
  expect_error([&] { Tokenizer::load((dir / "weights.bin").string()); },
               "tokenizer: " + (dir / "weights.bin").string(), "expected a folder");
  expect_error([&] { Tokenizer::from_vocab_merges(dir.string(), (dir / "vocab.bpe").string()); },
               "tokenizer: " + dir.string(), "not a regular file");
  expect_error([&] { Tokenizer::from_tokenizer_json((dir / "x.json").string()); },
               "tokenizer: " + (dir / "x.json").string(), "no such file");
}

TEST(TokenizerErrors, OversizedFileIsNotRead) {
  const fs::path dir = temp_dir("huge");
  { std::ofstream(dir / "vocab.json") << "{"; }
  fs::resize_file(dir / "vocab.json", 300ull << 20);  // sparse: no disk, no memory
  write_text(dir / "merges.txt", "");
  expect_error([&] { Tokenizer::load(dir.string()); },
               "tokenizer: " + (dir / "vocab.json").string(), "more than a tokenizer file can be");
}

TEST(TokenizerErrors, MalformedVocab) {
  const Synthetic base;
  auto with_vocab = [&](const std::string& name, const std::string& vocab_json) {
    const fs::path dir = base.write(name);
    write_text(dir / "vocab.json", vocab_json);
    return dir;
  };
  struct Case {
    std::string name, vocab, needle;
  };
  Json dup = base.vocab;
  dup["zz"] = 5;
  Json gap = base.vocab;
  gap["zz"] = 300;
  Json missing_byte = base.vocab;
  missing_byte.erase(byte_level("A"));
  missing_byte[byte_level("AA")] = 65;
  Json not_byte_level = base.vocab;
  not_byte_level["\u2581x"] = 256;
  Json empty_token = base.vocab;
  empty_token[""] = 256;
  const std::vector<Case> cases = {
      {"trunc", "{\"a\": 1", "malformed JSON"},
      {"garbage", "not json at all", "malformed JSON"},
      {"trailing", "{} {}", "malformed JSON"},
      {"array", "[1, 2]", "must be a JSON object"},
      {"number", "42", "must be a JSON object"},
      {"str_id", "{\"a\": \"1\"}", "id must be an integer, got string"},
      {"float_id", "{\"a\": 1.5}", "id must be an integer, got number"},
      {"bool_id", "{\"a\": true}", "id must be an integer, got boolean"},
      {"null_id", "{\"a\": null}", "id must be an integer, got null"},
      {"nested", "{\"a\": {\"b\": 1}}", "id must be an integer, got object"},
      {"neg_id", "{\"a\": -1}", "out of range"},
      {"big_id", "{\"a\": 99999999999}", "out of range"},
      {"empty", "{}", "the vocab is empty"},
      {"dup", dup.dump(), "duplicate id 5"},
      {"gap", gap.dump(), "has id 300"},
      {"byte", missing_byte.dump(), "no token for byte 0x41"},
      {"alphabet", not_byte_level.dump(), "not in GPT-2's byte-level alphabet"},
      {"empty_token", empty_token.dump(), "empty string is not a valid token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path dir = with_vocab("vocab_" + c.name, c.vocab);
    expect_error([&] { Tokenizer::load(dir.string()); },
                 "tokenizer: " + (dir / "vocab.json").string(), c.needle);
  }
}

TEST(TokenizerErrors, MalformedMerges) {
  Synthetic base;
  base.merge("a", "b");
  const std::string a = byte_level("a"), bb = byte_level("b"), c = byte_level("c");
  struct Case {
    std::string name, merges, needle;
  };
  const std::vector<Case> cases = {
      {"one", "#version: 0.2\n" + a + "\n", "line 2: expected 'left right'"},
      {"three", "#version: 0.2\n" + a + " " + bb + " " + c + "\n", "line 2: expected"},
      {"lead_space", " " + a + "\n", "line 1: expected"},
      {"blank", a + " " + bb + "\n\n" + a + " " + bb + "\n", "line 2: expected"},
      {"unknown", a + " zz\n", "line 1: 'zz' is not in the vocab"},
      {"no_result", "#version: 0.2\n" + bb + " " + c + "\n", "line 2: '" + bb + c + "' is not in"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const fs::path dir = base.write("merges_" + k.name);
    write_text(dir / "merges.txt", k.merges);
    expect_error([&] { Tokenizer::load(dir.string()); },
                 "tokenizer: " + (dir / "merges.txt").string(), k.needle);
  }
}

TEST(TokenizerErrors, MalformedTokenizerJson) {
  Synthetic base;
  base.merge("a", "b");
  const Json model = {{"type", "BPE"}, {"vocab", base.vocab}, {"merges", base.merge_lines}};
  Json conflicting = model;
  conflicting["vocab"]["<|endoftext|>"] = 257;
  struct Case {
    std::string name;
    Json root;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"array", Json::array(), "expected a JSON object"},
      {"no_model", Json{{"x", 1}}, "no \"model\" object"},
      {"wordpiece", Json{{"model", {{"type", "WordPiece"}, {"vocab", base.vocab}}}},
       "only BPE is supported"},
      {"no_vocab", Json{{"model", {{"type", "BPE"}, {"merges", Json::array()}}}}, "no model.vocab"},
      {"vocab_list", Json{{"model", {{"vocab", {1, 2}}, {"merges", Json::array()}}}},
       "must be a JSON object"},
      {"no_merges", Json{{"model", {{"vocab", base.vocab}}}}, "no model.merges"},
      {"merge_number", Json{{"model", {{"vocab", base.vocab}, {"merges", {42}}}}},
       "model.merges[0]"},
      {"merge_triple", Json{{"model", {{"vocab", base.vocab}, {"merges", {{"a", "b", "c"}}}}}},
       "model.merges[0]"},
      {"added_not_list", Json{{"model", model}, {"added_tokens", 5}},
       "added_tokens must be a list"},
      {"added_no_id", Json{{"model", model}, {"added_tokens", {{{"content", "x"}}}}},
       "needs \"id\""},
      {"added_empty", Json{{"model", model}, {"added_tokens", {{{"id", 257}, {"content", ""}}}}},
       "is empty"},
      {"added_two_ids",
       Json{{"model", model},
            {"added_tokens", {{{"id", 257}, {"content", "x"}}, {{"id", 258}, {"content", "x"}}}}},
       "has two ids"},
      {"added_conflict",
       Json{{"model", conflicting},
            {"added_tokens", {{{"id", 258}, {"content", "<|endoftext|>"}}}}},
       "in the vocab but 258 in added_tokens"},
      {"added_dup_id", Json{{"model", model}, {"added_tokens", {{{"id", 3}, {"content", "<x>"}}}}},
       "duplicate id 3"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const fs::path dir = temp_dir("tj_" + k.name);
    write_text(dir / "tokenizer.json", k.root.dump());
    expect_error([&] { Tokenizer::load(dir.string()); },
                 "tokenizer: " + (dir / "tokenizer.json").string(), k.needle);
  }
}

TEST(TokenizerErrors, DecodeIdsOutOfRange) {
  Synthetic s;
  const Tokenizer t = s.load("decode_range");
  ASSERT_EQ(t.vocab_size(), 256u);
  EXPECT_EQ(t.decode(Ids{104, 105}), "hi");
  expect_error(
      [&] {
        t.decode(Ids{104, 256});
      },
      "tokenizer: decode", "id 256 out of range [0, 256)");
  expect_error([&] { t.token_bytes(4000000000u); }, "tokenizer: decode", "out of range");
}
