// The character-level tokenizer, and saving tokenizers (char and BPE) into a model folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "forge/error.h"
#include "forge/tokenizer.h"

namespace fs = std::filesystem;
using forge::Error;
using forge::ErrorKind;
using namespace forge::testutil;
using forge::Tokenizer;
using Ids = std::vector<uint32_t>;
using Json = nlohmann::json;

namespace {

const std::string kCasesPath = FORGE_SOURCE_DIR "/tests/data/tokenizer_cases.json";

std::vector<std::string> symbols_of(const Tokenizer& t) {
  std::vector<std::string> out;
  for (uint32_t id = 0; id < t.vocab_size(); ++id) out.push_back(t.token_bytes(id));
  return out;
}

// ASCII, accents (precomposed and combining), CJK, emoji (4-byte and a ZWJ sequence), and
// invalid UTF-8: a lone continuation byte, a truncated 3-byte character, an overlong "/",
// a surrogate, a byte above F4.
const std::string kMixed =
    "Hi, naïve café!\n e\xcc\x81 日本語 🙂👩\xe2\x80\x8d💻 \x80 \xe6\x97 \xc0\xaf "
    "\xed\xa0\x80 "
    "\xf5";

}  // namespace

TEST(CharTokenizer, VocabIsDistinctCharactersSortedByBytes) {
  const Tokenizer t = Tokenizer::build_char("banana 日本 🙂 é\xff");
  EXPECT_TRUE(t.is_char_level());
  EXPECT_EQ(t.kind(), Tokenizer::Kind::Char);
  // Written out by hand: each symbol's bytes, in byte order.
  const std::vector<std::string> expected = {" ",
                                             "a",
                                             "b",
                                             "n",
                                             "\xc3\xa9" /* é */,
                                             "\xe6\x97\xa5" /* 日 */,
                                             "\xe6\x9c\xac" /* 本 */,
                                             "\xf0\x9f\x99\x82" /* 🙂 */,
                                             "\xff"};
  EXPECT_EQ(symbols_of(t), expected);
  EXPECT_EQ(t.vocab_size(), 9u);
  EXPECT_EQ(t.eot_id(), -1);
  EXPECT_EQ(t.special_id("<|endoftext|>"), -1);
  EXPECT_EQ(t.encode("banana"), (Ids{2, 1, 3, 1, 3, 1}));
  EXPECT_EQ(t.encode("日本🙂\xff é"), (Ids{5, 6, 7, 8, 0, 4}));
}

TEST(CharTokenizer, RoundTripMixedText) {
  const Tokenizer t = Tokenizer::build_char(kMixed);
  const Ids ids = t.encode(kMixed);
  EXPECT_EQ(t.decode(ids), kMixed);
  EXPECT_EQ(t.encode_ordinary(kMixed), ids);
  // One id per character, and the vocab, as Python counts them:
  // len(s.decode("utf-8", "surrogateescape")) = 42, len(set(...)) = 30 (each invalid byte
  // decodes to a surrogate of its own).
  EXPECT_EQ(ids.size(), 42u);
  EXPECT_EQ(t.vocab_size(), 30u);
  // Each invalid byte is a symbol of its own.
  for (const char* b : {"\x80", "\xe6", "\x97", "\xc0", "\xaf", "\xed", "\xa0", "\xf5"})
    EXPECT_EQ(t.encode(b).size(), 1u) << static_cast<int>(static_cast<uint8_t>(b[0]));
  // 0xE6 0x97 alone are bytes, but with a third byte they are one character.
  const Tokenizer t2 = Tokenizer::build_char("\xe6\x97\xa5");
  EXPECT_EQ(t2.vocab_size(), 1u);
}

TEST(CharTokenizer, UnknownCharacterNamed) {
  const Tokenizer t = Tokenizer::build_char("abc é");
  expect_error(
      [&] { t.encode("ab z"); }, ErrorKind::Tokenizer,
      "tokenizer: encode: 'z' (U+007A) at byte 3 is not in the character-level vocabulary");
  expect_error([&] { t.encode("é日"); }, ErrorKind::Tokenizer, "'日' (U+65E5) at byte 2");
  expect_error([&] { t.encode("a\xff"); }, ErrorKind::Tokenizer, "byte 0xFF at byte 1");
  expect_error([&] { t.encode("a\n"); }, ErrorKind::Tokenizer, "character (U+000A) at byte 1");
  // A lone 0xC3 is not é's first byte as far as the vocab is concerned.
  expect_error([&] { t.encode("\xc3"); }, ErrorKind::Tokenizer, "byte 0xC3 at byte 0");
  expect_error([&] { t.decode(Ids{5}); }, ErrorKind::Tokenizer, "id 5 out of range [0, 5)");
  expect_error([] { Tokenizer::build_char(""); }, ErrorKind::Tokenizer, "empty");
}

TEST(CharTokenizer, FromSymbolsValidates) {
  const Tokenizer t = Tokenizer::from_char_symbols({"z", "a", "\xff", "日"});
  EXPECT_EQ(t.encode("az日\xff"), (Ids{1, 0, 3, 2}));  // ids in the given order
  expect_error([] { Tokenizer::from_char_symbols({}); }, ErrorKind::Tokenizer, "empty");
  expect_error(
      [] {
        Tokenizer::from_char_symbols({"a", "a"});
      },
      ErrorKind::Tokenizer, "symbol 1 ('a' (U+0061)) appears twice");
  expect_error([] { Tokenizer::from_char_symbols({"ab"}); }, ErrorKind::Tokenizer,
               "not one character");
  expect_error([] { Tokenizer::from_char_symbols({"\xe6\x97"}); }, ErrorKind::Tokenizer,
               "not one character");
  expect_error([] { Tokenizer::from_char_symbols({""}); }, ErrorKind::Tokenizer, "is empty");
}

TEST(CharTokenizer, SaveLoadRoundTrip) {
  const fs::path dir = fresh_dir("tokchar_saveload");
  const Tokenizer t = Tokenizer::build_char(kMixed);
  t.save((dir / "model").string());
  ASSERT_TRUE(fs::exists(dir / "model" / "tokenizer_char.json"));
  const Json j = Json::parse(read_bytes(dir / "model" / "tokenizer_char.json"));
  EXPECT_EQ(j["type"], "forge-char");
  EXPECT_EQ(j["version"], 1);
  ASSERT_EQ(j["symbols"].size(), t.vocab_size());
  EXPECT_EQ(j["symbols"][0], "\n");
  EXPECT_EQ(j["symbols"].back(), 0xF5);  // invalid bytes are integers, last in byte order

  for (const std::string& path :
       {(dir / "model").string(), (dir / "model" / "tokenizer_char.json").string()}) {
    const Tokenizer u = Tokenizer::load(path);
    EXPECT_TRUE(u.is_char_level());
    EXPECT_EQ(symbols_of(u), symbols_of(t));
    EXPECT_EQ(u.encode(kMixed), t.encode(kMixed));
    EXPECT_EQ(u.fingerprint(), t.fingerprint());
  }
  EXPECT_NE(Tokenizer::build_char("abc").fingerprint(), Tokenizer::build_char("abd").fingerprint());
  // No temp files left.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "model"), fs::directory_iterator()), 1);
}

TEST(CharTokenizer, MalformedFileRejected) {
  const fs::path dir = fresh_dir("tokchar_malformed");
  const std::string file = (dir / "tokenizer_char.json").string();
  auto check = [&](const std::string& text, const std::string& needle) {
    write_bytes(file, text);
    expect_error([&] { Tokenizer::load(dir.string()); }, ErrorKind::Tokenizer, needle);
  };
  check("{", "malformed JSON");
  check("[]", "expected a JSON object");
  check(R"({"symbols": ["a"]})", "\"type\" must be \"forge-char\"");
  check(R"({"type": "bpe", "symbols": ["a"]})", "got \"bpe\"");
  check(R"({"type": "forge-char", "version": 2, "symbols": ["a"]})", "unknown version 2");
  check(R"({"type": "forge-char"})", "no \"symbols\" list");
  check(R"({"type": "forge-char", "symbols": "ab"})", "must be a list");
  check(R"({"type": "forge-char", "symbols": []})", "empty");
  check(R"({"type": "forge-char", "symbols": ["ab"]})", "symbols[0] must be one UTF-8 character");
  check(R"({"type": "forge-char", "symbols": ["a", 65]})", "symbols[1] must be");
  check(R"({"type": "forge-char", "symbols": ["a", 256]})", "symbols[1] must be");
  check(R"({"type": "forge-char", "symbols": ["a", null]})", "symbols[1] must be");
  check(R"({"type": "forge-char", "symbols": [255, "a", 255]})", "appears twice");
  check(R"({"type": "forge-char", "symbols": ["é", "é"]})", "appears twice");
  // The message names the file.
  check(R"({"type": "forge-char", "symbols": ["ab"]})", file);
}

TEST(CharTokenizer, FolderWithBothKindsIsAnError) {
  FORGE_REQUIRE_GPT2_FILES();
  const fs::path dir = fresh_dir("tokchar_both");
  Tokenizer::build_char("abc").save(dir.string());
  fs::copy_file(kGpt2Dir + "/encoder.json", dir / "encoder.json");
  fs::copy_file(kGpt2Dir + "/vocab.bpe", dir / "vocab.bpe");
  expect_error([&] { Tokenizer::load(dir.string()); }, ErrorKind::Tokenizer,
               "holds both tokenizer_char.json and encoder.json");
  // Saving either kind makes the folder hold exactly that one.
  Tokenizer::load(kGpt2Dir).save(dir.string());
  EXPECT_FALSE(fs::exists(dir / "tokenizer_char.json"));
  EXPECT_FALSE(Tokenizer::load(dir.string()).is_char_level());
  Tokenizer::build_char("abc").save(dir.string());
  for (const char* name : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"})
    EXPECT_FALSE(fs::exists(dir / name)) << name;
  EXPECT_TRUE(Tokenizer::load(dir.string()).is_char_level());
}

TEST(CharTokenizer, EmptyHandleThrows) {
  const Tokenizer t;
  EXPECT_FALSE(t.defined());
  expect_error([&] { t.encode("a"); }, ErrorKind::Tokenizer, "empty");
  expect_error([&] { t.vocab_size(); }, ErrorKind::Tokenizer, "empty");
  expect_error([&] { t.save("/tmp"); }, ErrorKind::Tokenizer, "empty");
}

// ---- BPE save ---------------------------------------------------------------------------------

TEST(CharTokenizer, BpeSaveLoadGivesIdenticalIds) {
  FORGE_REQUIRE_GPT2_FILES();
  const fs::path dir = fresh_dir("tokchar_bpe");
  const Tokenizer gpt2 = Tokenizer::load(kGpt2Dir);
  gpt2.save((dir / "out").string());
  // HF's slow-tokenizer layout: vocab.json (token → id) and merges.txt with a version line.
  const Json vocab = Json::parse(read_bytes(dir / "out" / "vocab.json"));
  EXPECT_EQ(vocab.size(), 50257u);
  EXPECT_EQ(vocab["<|endoftext|>"], 50256);
  EXPECT_EQ(vocab["\xc4\xa0the"], 262);  // "Ġthe"
  const std::string merges = read_bytes(dir / "out" / "merges.txt");
  EXPECT_TRUE(merges.starts_with("#version: 0.2\n\xc4\xa0 t\n"));  // "Ġ t" is rank 0
  EXPECT_EQ(std::count(merges.begin(), merges.end(), '\n'), 50001);
  // The original encoder.json holds the same vocab.
  EXPECT_EQ(vocab, Json::parse(read_bytes(kGpt2Dir + "/encoder.json")));
  EXPECT_FALSE(fs::exists(dir / "out" / "added_tokens.json"));

  const Tokenizer back = Tokenizer::load((dir / "out").string());
  EXPECT_EQ(back.fingerprint(), gpt2.fingerprint());
  EXPECT_EQ(back.eot_id(), 50256);
  std::string sample;
  for (const Json& c : Json::parse(read_bytes(kCasesPath))) sample += c.get<std::string>() + "\n";
  sample += "<|endoftext|>" + std::string("caf\xc3\xa9 \xff\xfe");
  EXPECT_EQ(back.encode(sample), gpt2.encode(sample));
  EXPECT_EQ(back.decode(back.encode(sample)), sample);
}

TEST(CharTokenizer, BpeSaveKeepsExtraSpecialTokens) {
  // A small tokenizer.json with two special tokens, one beyond <|endoftext|>.
  const fs::path dir = fresh_dir("tokchar_bpe_special");
  Json vocab = Json::object();
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    // GPT-2's byte → code point map (printable bytes are themselves, others from U+0100).
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
    std::string s;
    if (cp < 0x80) {
      s = std::string(1, static_cast<char>(cp));
    } else {
      s = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  vocab["<|endoftext|>"] = 257;
  vocab["<|pad|>"] = 258;
  const Json tj = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}},
      {"added_tokens",
       {{{"id", 257}, {"content", "<|endoftext|>"}}, {{"id", 258}, {"content", "<|pad|>"}}}}};
  write_bytes(dir / "tokenizer.json", tj.dump());
  const Tokenizer t = Tokenizer::load(dir.string());
  ASSERT_EQ(t.special_id("<|pad|>"), 258);
  t.save((dir / "out").string());
  EXPECT_EQ(Json::parse(read_bytes(dir / "out" / "added_tokens.json")), (Json{{"<|pad|>", 258}}));
  const Tokenizer back = Tokenizer::load((dir / "out").string());
  EXPECT_EQ(back.special_id("<|pad|>"), 258);
  EXPECT_EQ(back.eot_id(), 257);
  EXPECT_EQ(back.encode("ab<|pad|>ba<|endoftext|>"), (Ids{256, 258, 98, 97, 257}));
  EXPECT_EQ(back.fingerprint(), t.fingerprint());

  // Saving over the tokenizer.json folder removes it (it would win over the new files).
  t.save(dir.string());
  EXPECT_FALSE(fs::exists(dir / "tokenizer.json"));
  EXPECT_EQ(Tokenizer::load(dir.string()).fingerprint(), t.fingerprint());
}

TEST(CharTokenizer, BpeFingerprintTellsTokenizersApart) {
  FORGE_REQUIRE_GPT2_FILES();
  const fs::path dir = fresh_dir("tokchar_fp");
  // The same files under another name: same fingerprint. One merge fewer: another.
  fs::copy_file(kGpt2Dir + "/encoder.json", dir / "vocab.json");
  std::string merges = read_bytes(kGpt2Dir + "/vocab.bpe");
  merges.erase(merges.rfind('\n', merges.size() - 2) + 1);
  write_bytes(dir / "merges.txt", merges);
  const Tokenizer gpt2 = Tokenizer::load(kGpt2Dir);
  const Tokenizer fewer = Tokenizer::load(dir.string());
  EXPECT_NE(fewer.fingerprint(), gpt2.fingerprint());
  write_bytes(dir / "merges.txt", read_bytes(kGpt2Dir + "/vocab.bpe"));
  EXPECT_EQ(Tokenizer::load(dir.string()).fingerprint(), gpt2.fingerprint());
}
