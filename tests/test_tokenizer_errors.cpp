// The tokenizer's errors: missing, oversized and malformed files of every layout
// (vocab.json + merges.txt, tokenizer.json), and ids outside the vocabulary when decoding.
// Each names the file and what is wrong in it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "forge/error.h"
#include "forge/tokenizer.h"
#include "tokenizer_test_util.h"

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
