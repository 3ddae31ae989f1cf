// Tests of the GPT-2 tokenizer. References: ids published for GPT-2, golden ids made with HF
// transformers + tiktoken (tests/data/tokenizer_golden.json, tools/golden_tokenizer.py), an
// independent Python port of OpenAI's encoder (tests/python/gpt2_encoder_ref.py), a reference
// BPE written here from GPT-2's description, and hand-computed ids on small synthetic vocabs.
// Tests that need the real files (scripts/fetch_tokenizer.sh) skip without them, except
// under CI=true, where they fail. The errors: test_tokenizer_errors.cpp.
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
#include "tokenizer_test_util.h"

namespace {

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
