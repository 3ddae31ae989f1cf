// Training data: token files, data::load (text, folders, token files, the cache, the split)
// and the batch samplers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "data_test_util.h"
#include "forge/data.h"
#include "forge/error.h"

namespace fs = std::filesystem;
using forge::Error;
using forge::ErrorKind;
using namespace forge::testutil;
using forge::Tokenizer;
namespace data = forge::data;
using Ids = std::vector<uint32_t>;

namespace {

// A token-file header written independently of the library (llm.c's layout).
std::string header(int32_t magic, int32_t version, int32_t count) {
  std::string h(1024, '\0');
  const int32_t v[3] = {magic, version, count};
  std::memcpy(h.data(), v, sizeof v);
  return h;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

const Tokenizer& gpt2() {
  static const Tokenizer tok = Tokenizer::load(kGpt2Dir);
  return tok;
}

}  // namespace

// ---- token files -----------------------------------------------------------------------------

TEST(DataTokenFile, Version1RoundTripIsLlmcLayout) {
  const fs::path dir = fresh_dir("data_tf1");
  const Ids ids = {0, 1, 50256, 65535, 7, 7};
  data::write_token_file((dir / "a.bin").string(), ids);
  // Byte-exact against an independently built file: header then uint16 tokens.
  const std::vector<uint16_t> narrow = {0, 1, 50256, 65535, 7, 7};
  EXPECT_EQ(read_bytes(dir / "a.bin"), header(20240520, 1, 6) + raw(narrow));
  EXPECT_EQ(data::read_token_file((dir / "a.bin").string()), ids);
  EXPECT_TRUE(data::is_token_file((dir / "a.bin").string()));
}

TEST(DataTokenFile, Version2ForLargeIds) {
  const fs::path dir = fresh_dir("data_tf2");
  const Ids ids = {65536, 0, 4000000000u, 3};
  data::write_token_file((dir / "b.bin").string(), ids);
  EXPECT_EQ(read_bytes(dir / "b.bin"), header(20240520, 2, 4) + raw(ids));
  EXPECT_EQ(data::read_token_file((dir / "b.bin").string()), ids);
  // An llm.c-made version 2 file reads too.
  write_bytes(dir / "c.bin", header(20240520, 2, 2) + raw(Ids{5, 70000}));
  EXPECT_EQ(data::read_token_file((dir / "c.bin").string()), (Ids{5, 70000}));
}

TEST(DataTokenFile, EmptyAndOverwrite) {
  const fs::path dir = fresh_dir("data_tf3");
  const std::string p = (dir / "e.bin").string();
  data::write_token_file(p, Ids{});
  EXPECT_EQ(read_bytes(p), header(20240520, 1, 0));
  EXPECT_TRUE(data::read_token_file(p).empty());
  data::write_token_file(p, Ids{9, 8});
  EXPECT_EQ(data::read_token_file(p), (Ids{9, 8}));
  // No temp files left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(DataTokenFile, CorruptFilesRejected) {
  const fs::path dir = fresh_dir("data_tf4");
  auto check = [&](const std::string& bytes, ErrorKind kind, const std::string& needle) {
    write_bytes(dir / "x.bin", bytes);
    expect_error([&] { data::read_token_file((dir / "x.bin").string()); }, kind, needle);
  };
  check("", ErrorKind::Format, "truncated header");
  check(header(20240520, 1, 0).substr(0, 1023), ErrorKind::Format, "truncated header");
  check(header(20240521, 1, 0), ErrorKind::Format, "bad magic");
  check(header(20240520, 3, 0), ErrorKind::Format, "unknown version 3");
  check(header(20240520, 0, 0), ErrorKind::Format, "unknown version 0");
  check(header(20240520, 1, -1), ErrorKind::Format, "negative token count");
  // Truncated data, extra data, a count far beyond the file (no huge allocation).
  check(header(20240520, 1, 3) + raw(std::vector<uint16_t>{1, 2}), ErrorKind::Format,
        "header says 3 tokens");
  check(header(20240520, 2, 1) + raw(Ids{1, 2}), ErrorKind::Format, "header says 1 tokens");
  check(header(20240520, 2, 2147483647), ErrorKind::Format, "header says 2147483647");
  expect_error([&] { data::read_token_file((dir / "missing.bin").string()); }, ErrorKind::Io,
               "no such file");
  expect_error([&] { data::read_token_file(dir.string()); }, ErrorKind::Io, "not a regular file");
  EXPECT_FALSE(data::is_token_file((dir / "missing.bin").string()));
  EXPECT_FALSE(data::is_token_file(dir.string()));
  write_bytes(dir / "t.txt", "hello world");
  EXPECT_FALSE(data::is_token_file((dir / "t.txt").string()));
}

TEST(DataTokenFile, WriteIntoMissingFolderIsIoError) {
  const fs::path dir = fresh_dir("data_tf5");
  expect_error([&] { data::write_token_file((dir / "no/such/dir/x.bin").string(), Ids{1}); },
               ErrorKind::Io, "write_token_file");
}

// ---- data::load ---------------------------------------------------------------------------------

TEST(DataLoad, CharTextFileAndSplit) {
  const fs::path dir = fresh_dir("data_load1");
  const std::string text = "hello world, hello data!\n";  // 25 characters
  write_bytes(dir / "a.txt", text);
  data::DataOptions o;
  o.path = (dir / "a.txt").string();
  o.tokenizer = "char";
  o.val_fraction = 0.2;
  const data::Dataset ds = data::load(o);
  ASSERT_TRUE(ds.has_tokenizer);
  EXPECT_TRUE(ds.tokenizer.is_char_level());
  // Distinct characters of the text: "\n !,adehlortw" = 13.
  EXPECT_EQ(ds.vocab_size, 13);
  EXPECT_EQ(ds.val.size(), 5u);  // round(25 * 0.2)
  EXPECT_EQ(ds.train.size(), 20u);
  Ids all = ds.train;
  all.insert(all.end(), ds.val.begin(), ds.val.end());
  EXPECT_EQ(ds.tokenizer.decode(all), text);
  EXPECT_EQ(ds.tokenizer.decode(ds.val), "ata!\n");
  EXPECT_EQ(ds.cache_path, "");
}

TEST(DataLoad, SplitRounding) {
  const fs::path dir = fresh_dir("data_load2");
  write_bytes(dir / "a.txt", std::string(1001, 'x'));
  data::DataOptions o;
  o.path = (dir / "a.txt").string();
  o.tokenizer = "char";
  for (auto [frac, val] : {std::pair{0.0, 0}, {0.1, 100}, {0.0005, 1}, {0.00049, 0}, {0.5, 501}}) {
    o.val_fraction = frac;
    const data::Dataset ds = data::load(o);
    EXPECT_EQ(ds.val.size(), static_cast<size_t>(val)) << frac;
    EXPECT_EQ(ds.train.size() + ds.val.size(), 1001u) << frac;
  }
}

TEST(DataLoad, FolderSortedTxtOnly) {
  const fs::path dir = fresh_dir("data_load3");
  fs::create_directories(dir / "docs" / "sub");
  write_bytes(dir / "docs" / "b.txt", "BB");
  write_bytes(dir / "docs" / "a.txt", "AA");
  write_bytes(dir / "docs" / "c.md", "ignored");
  write_bytes(dir / "docs" / "sub" / "d.txt", "not read: subfolders are not searched");
  write_bytes(dir / "docs" / "ab.txt", "");  // empty: no separator either
  data::DataOptions o;
  o.path = (dir / "docs").string();
  o.tokenizer = "char";
  o.val_fraction = 0;
  const data::Dataset ds = data::load(o);
  EXPECT_EQ(ds.tokenizer.decode(ds.train), "AA\n\nBB");
  EXPECT_TRUE(ds.val.empty());

  fs::create_directories(dir / "empty");
  o.path = (dir / "empty").string();
  expect_error([&] { data::load(o); }, ErrorKind::Io, "no .txt files");
  write_bytes(dir / "empty" / "x.json", "{}");
  expect_error([&] { data::load(o); }, ErrorKind::Io, "no .txt files");
}

TEST(DataLoad, BpeFolderJoinsWithEndOfText) {
  FORGE_REQUIRE_GPT2_FILES();
  const fs::path dir = fresh_dir("data_load4");
  write_bytes(dir / "1.txt", "Hello world");
  write_bytes(dir / "2.txt", " The end.");
  data::DataOptions o;
  o.path = dir.string();
  o.tokenizer = kGpt2Dir;
  o.val_fraction = 0;
  const data::Dataset ds = data::load(o);
  // GPT-2 ids from HF transformers: "Hello world" = [15496, 995], " The end." = [383, 886, 13].
  EXPECT_EQ(ds.train, (Ids{15496, 995, 50256, 383, 886, 13}));
  EXPECT_EQ(ds.vocab_size, 50257);
  EXPECT_FALSE(ds.tokenizer.is_char_level());
}

TEST(DataLoad, BpeNonUtf8StillTokenizes) {
  FORGE_REQUIRE_GPT2_FILES();
  const fs::path dir = fresh_dir("data_load5");
  const std::string text = "ab\xff\xfe cd \xc3(";
  write_bytes(dir / "a.txt", text);
  data::DataOptions o;
  o.path = (dir / "a.txt").string();
  o.tokenizer = kGpt2Dir;
  o.val_fraction = 0;
  const data::Dataset ds = data::load(o);
  EXPECT_EQ(ds.tokenizer.decode(ds.train), text);
  EXPECT_EQ(ds.train, gpt2().encode(text));
}

TEST(DataLoad, CharNonUtf8BytesAreSymbols) {
  const fs::path dir = fresh_dir("data_load6");
  const std::string text =
      "a\xff"
      "b\xc3\xa9\xc3";  // a, 0xFF, b, é, lone 0xC3
  write_bytes(dir / "a.txt", text);
  data::DataOptions o;
  o.path = (dir / "a.txt").string();
  o.tokenizer = "char";
  o.val_fraction = 0;
  const data::Dataset ds = data::load(o);
  // Symbols sorted by bytes: "a" 61, "b" 62, 0xC3, "é" C3 A9, 0xFF.
  EXPECT_EQ(ds.vocab_size, 5);
  EXPECT_EQ(ds.train, (Ids{0, 4, 1, 3, 2}));
}

TEST(DataLoad, TokenFile) {
  const fs::path dir = fresh_dir("data_load7");
  Ids ids(100);
  for (uint32_t i = 0; i < 100; ++i) ids[i] = (i * 7) % 90;
  data::write_token_file((dir / "t.bin").string(), ids);
  data::DataOptions o;
  o.path = (dir / "t.bin").string();
  o.tokenizer = "char";  // ignored for token files
  o.val_fraction = 0.25;
  const data::Dataset ds = data::load(o);
  EXPECT_FALSE(ds.has_tokenizer);
  EXPECT_EQ(ds.vocab_size, 90);  // largest id 89, + 1
  EXPECT_EQ(ds.train, Ids(ids.begin(), ids.begin() + 75));
  EXPECT_EQ(ds.val, Ids(ids.begin() + 75, ids.end()));
  EXPECT_EQ(ds.cache_path, o.path);

  // A damaged token file is an error, not text.
  std::string bytes = read_bytes(dir / "t.bin");
  write_bytes(dir / "bad.bin", bytes.substr(0, bytes.size() - 1));
  o.path = (dir / "bad.bin").string();
  expect_error([&] { data::load(o); }, ErrorKind::Format, "header says 100 tokens");
}

TEST(DataLoad, Errors) {
  const fs::path dir = fresh_dir("data_load8");
  data::DataOptions o;
  o.tokenizer = "char";
  o.path = (dir / "missing.txt").string();
  expect_error([&] { data::load(o); }, ErrorKind::Io, "data::load: ");
  expect_error([&] { data::load(o); }, ErrorKind::Io, "no such file");
  write_bytes(dir / "empty.txt", "");
  o.path = (dir / "empty.txt").string();
  expect_error([&] { data::load(o); }, ErrorKind::Range, "holds no tokens");
  fs::create_directories(dir / "f");
  write_bytes(dir / "f" / "a.txt", "");
  write_bytes(dir / "f" / "b.txt", "");
  o.path = (dir / "f").string();
  expect_error([&] { data::load(o); }, ErrorKind::Range, "holds no tokens");
  if (forge::testutil::gpt2_files_present()) {
    o.tokenizer = kGpt2Dir;  // no "<|endoftext|>" between empty documents either
    expect_error([&] { data::load(o); }, ErrorKind::Range, "holds no tokens");
    o.tokenizer = "char";
  }
  data::write_token_file((dir / "e.bin").string(), Ids{});
  o.path = (dir / "e.bin").string();
  expect_error([&] { data::load(o); }, ErrorKind::Range, "holds no tokens");

  write_bytes(dir / "a.txt", "abc");
  o.path = (dir / "a.txt").string();
  for (double bad : {-0.1, 0.51, 1.0, std::nan("")}) {
    o.val_fraction = bad;
    expect_error([&] { data::load(o); }, ErrorKind::Range, "val_fraction");
  }
  o.val_fraction = 0.1;
  o.tokenizer = (dir / "no_tokenizer_here").string();
  expect_error([&] { data::load(o); }, ErrorKind::Tokenizer, "no such file");
  o.tokenizer = "";
  expect_error([&] { data::load(o); }, ErrorKind::Tokenizer, "give a tokenizer");
}

TEST(DataLoad, CacheReusedAndRebuiltWhenSourceChanges) {
  const fs::path dir = fresh_dir("data_cache1");
  write_bytes(dir / "a.txt", "abcabc");
  data::DataOptions o;
  o.path = (dir / "a.txt").string();
  o.tokenizer = "char";
  o.cache_dir = (dir / "cache").string();
  o.val_fraction = 0;
  const data::Dataset first = data::load(o);
  EXPECT_EQ(first.cache_path, (dir / "cache" / "tokens.bin").string());
  EXPECT_EQ(data::read_token_file(first.cache_path), (Ids{0, 1, 2, 0, 1, 2}));
  ASSERT_TRUE(fs::exists(dir / "cache" / "tokens.json"));

  // Reuse: plant different ids in the cache; an unchanged source must return them, which
  // shows the text was not tokenized again. The vocab comes back from tokens.json.
  data::write_token_file(first.cache_path, Ids{2, 2, 1, 0, 0, 0});
  data::Dataset again = data::load(o);
  EXPECT_EQ(again.train, (Ids{2, 2, 1, 0, 0, 0}));
  EXPECT_EQ(again.tokenizer.decode(again.train), "ccbaaa");

  // Same size, new modification time: rebuilt.
  write_bytes(dir / "a.txt", "xyzxyz");
  fs::last_write_time(dir / "a.txt", fs::last_write_time(dir / "a.txt") + std::chrono::seconds(5));
  again = data::load(o);
  EXPECT_EQ(again.tokenizer.decode(again.train), "xyzxyz");
  EXPECT_EQ(data::read_token_file(first.cache_path), (Ids{0, 1, 2, 0, 1, 2}));

  // New size: rebuilt.
  write_bytes(dir / "a.txt", "xyzxyzz");
  again = data::load(o);
  EXPECT_EQ(again.train.size(), 7u);

  // A damaged cache is rebuilt silently.
  write_bytes(dir / "cache" / "tokens.bin", "garbage");
  again = data::load(o);
  EXPECT_EQ(again.tokenizer.decode(again.train), "xyzxyzz");
  write_bytes(dir / "cache" / "tokens.json", "{not json");
  again = data::load(o);
  EXPECT_EQ(again.tokenizer.decode(again.train), "xyzxyzz");

  // Out-of-vocab ids planted in the cache are not trusted.
  data::write_token_file(first.cache_path, Ids{0, 1, 9, 0, 1, 2, 2});
  again = data::load(o);
  EXPECT_EQ(again.tokenizer.decode(again.train), "xyzxyzz");
}

TEST(DataLoad, CacheKeyedByFolderContentsAndTokenizer) {
  FORGE_REQUIRE_GPT2_FILES();
  const fs::path dir = fresh_dir("data_cache2");
  write_bytes(dir / "a.txt", "Hello world");
  data::DataOptions o;
  o.path = dir.string();
  o.cache_dir = (dir / "cache").string();
  o.val_fraction = 0;
  o.tokenizer = kGpt2Dir;
  EXPECT_EQ(data::load(o).train, (Ids{15496, 995}));
  // Planted ids are reused with the same tokenizer and files...
  data::write_token_file((dir / "cache" / "tokens.bin").string(), Ids{1, 2});
  EXPECT_EQ(data::load(o).train, (Ids{1, 2}));
  // ...but not after a file is added to the folder,
  write_bytes(dir / "b.txt", " The end.");
  EXPECT_EQ(data::load(o).train, (Ids{15496, 995, 50256, 383, 886, 13}));
  // The same tokenizer from another folder reuses the cache (it is keyed by fingerprint)...
  data::write_token_file((dir / "cache" / "tokens.bin").string(), Ids{1, 2, 3, 4, 5, 6});
  gpt2().save((dir / "tok").string());
  o.tokenizer = (dir / "tok").string();
  EXPECT_EQ(data::load(o).train, (Ids{1, 2, 3, 4, 5, 6}));
  // ...and a different one (GPT-2 without its last merge) does not.
  fs::create_directories(dir / "tok2");
  fs::copy_file(kGpt2Dir + "/encoder.json", dir / "tok2" / "vocab.json");
  std::string merges = read_bytes(kGpt2Dir + "/vocab.bpe");
  merges.erase(merges.rfind('\n', merges.size() - 2) + 1);  // drop the last merge
  write_bytes(dir / "tok2" / "merges.txt", merges);
  o.tokenizer = (dir / "tok2").string();
  EXPECT_EQ(data::load(o).train, (Ids{15496, 995, 50256, 383, 886, 13}));
  // nor by a char-level run on the same data.
  o.tokenizer = "char";
  const data::Dataset ds = data::load(o);
  EXPECT_EQ(ds.tokenizer.decode(ds.train), "Hello world\n\n The end.");
}

TEST(DataLoad, GoldenIdsOnSampleText) {
  FORGE_REQUIRE_GPT2_FILES();
  // data::load over a multi-document folder gives exactly the ids of encoding the joined
  // text in one call (which the tokenizer tests check against HF and tiktoken).
  const fs::path dir = fresh_dir("data_golden");
  std::string joined;
  for (int d = 0; d < 12; ++d) {
    std::string doc;
    for (int i = 0; i < 200 + 37 * d; ++i)
      doc += "Doc " + std::to_string(d) + " line " + std::to_string(i) +
             ": naïve café 日本 🙂\n";
    char name[16];
    std::snprintf(name, sizeof name, "%02d.txt", d);
    write_bytes(dir / name, doc);
    joined += (d ? "<|endoftext|>" : "") + doc;
  }
  data::DataOptions o;
  o.path = dir.string();
  o.tokenizer = kGpt2Dir;
  o.val_fraction = 0.1;
  const data::Dataset ds = data::load(o);
  const Ids want = gpt2().encode(joined);
  Ids got = ds.train;
  got.insert(got.end(), ds.val.begin(), ds.val.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(ds.val.size(), static_cast<size_t>(std::llround(want.size() * 0.1)));
}

// ---- batches ----------------------------------------------------------------------------------

namespace {

std::shared_ptr<const Ids> ramp(uint32_t n) {
  auto v = std::make_shared<Ids>(n);
  for (uint32_t i = 0; i < n; ++i) (*v)[i] = i * 3 + 1;  // id identifies its position
  return v;
}

}  // namespace

TEST(DataBatchSampler, WindowsAreShiftedSlicesInsideTheData) {
  const auto tokens = ramp(50);
  data::BatchSampler s(tokens, 4, 8, 42);
  std::set<uint32_t> starts;
  for (int step = 0; step < 200; ++step) {
    const data::Batch b = s.next();
    ASSERT_EQ(b.inputs.shape(), (forge::Shape{4, 8}));
    ASSERT_EQ(b.targets.shape(), (forge::Shape{4, 8}));
    ASSERT_EQ(b.inputs.dtype(), forge::DType::U32);
    const auto in = b.inputs.to_vector<uint32_t>();
    const auto tg = b.targets.to_vector<uint32_t>();
    for (int r = 0; r < 4; ++r) {
      const uint32_t start = (in[r * 8] - 1) / 3;
      ASSERT_LE(start + 8, 49u);  // the window's last target is inside the data
      starts.insert(start);
      for (int t = 0; t < 8; ++t) {
        EXPECT_EQ(in[r * 8 + t], (*tokens)[start + t]);
        EXPECT_EQ(tg[r * 8 + t], (*tokens)[start + t + 1]);
      }
    }
  }
  // 800 draws over the 42 possible starts reach every one of them, the last included.
  EXPECT_EQ(starts.size(), 42u);
  EXPECT_EQ(*starts.rbegin(), 41u);
  EXPECT_EQ(s.position(), 800u);
}

TEST(DataBatchSampler, DeterministicAndSeekable) {
  const auto tokens = ramp(1000);
  data::BatchSampler a(tokens, 3, 16, 7), b(tokens, 3, 16, 7), c(tokens, 3, 16, 8);
  std::vector<Ids> seq_a;
  bool differs = false;
  for (int i = 0; i < 10; ++i) {
    seq_a.push_back(a.next().inputs.to_vector<uint32_t>());
    EXPECT_EQ(b.next().inputs.to_vector<uint32_t>(), seq_a.back());
    differs |= c.next().inputs.to_vector<uint32_t>() != seq_a.back();
  }
  EXPECT_TRUE(differs);  // another seed, other windows
  // A sampler restored at a saved position draws what the original drew from there.
  data::BatchSampler d(tokens, 3, 16, 7);
  d.seek(3 * 6);
  EXPECT_EQ(d.next().inputs.to_vector<uint32_t>(), seq_a[6]);
  EXPECT_EQ(d.position(), 21u);
  // The counter is per window: batch 2 x 3 draws = batch 3 x 2 draws, window for window.
  data::BatchSampler e(tokens, 2, 16, 7);
  Ids flat;
  for (int i = 0; i < 3; ++i) {
    const auto v = e.next().inputs.to_vector<uint32_t>();
    flat.insert(flat.end(), v.begin(), v.end());
  }
  Ids want = seq_a[0];
  want.insert(want.end(), seq_a[1].begin(), seq_a[1].end());
  EXPECT_EQ(flat, want);
}

TEST(DataBatchSampler, Errors) {
  expect_error([] { data::BatchSampler(ramp(8), 1, 8, 0); }, ErrorKind::Range,
               "needs 9 tokens, the data has 8");
  data::BatchSampler ok(ramp(9), 1, 8, 0);  // exactly one window
  EXPECT_EQ(ok.next().inputs.to_vector<uint32_t>()[0], 1u);
  expect_error([] { data::BatchSampler(ramp(8), 0, 2, 0); }, ErrorKind::Range, "batch and seq");
  expect_error([] { data::BatchSampler(ramp(8), 1, 0, 0); }, ErrorKind::Range, "batch and seq");
  expect_error([] { data::BatchSampler(ramp(8), int64_t{1} << 40, 2, 0); }, ErrorKind::Range,
               "batch * seq");
  expect_error([] { data::BatchSampler(nullptr, 1, 2, 0); }, ErrorKind::Range, "no tokens");
}

TEST(DataSequentialBatches, Shapes) {
  const auto tokens = ramp(100);
  // 100 / (8 + 1) = 11 windows: batches of 4, 4, 3.
  auto bs = data::sequential_batches(*tokens, 4, 8);
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[0].inputs.shape(), (forge::Shape{4, 8}));
  EXPECT_EQ(bs[2].inputs.shape(), (forge::Shape{3, 8}));
  EXPECT_EQ(bs[2].targets.shape(), (forge::Shape{3, 8}));
  // Window w starts at w * 9.
  for (size_t b = 0; b < bs.size(); ++b) {
    const auto in = bs[b].inputs.to_vector<uint32_t>();
    const auto tg = bs[b].targets.to_vector<uint32_t>();
    for (size_t i = 0; i < in.size(); ++i) {
      const size_t w = b * 4 + i / 8, t = i % 8;
      EXPECT_EQ(in[i], (*tokens)[w * 9 + t]);
      EXPECT_EQ(tg[i], (*tokens)[w * 9 + t + 1]);
    }
  }
  EXPECT_EQ(data::sequential_batches(*tokens, 4, 8, 2).size(), 2u);
  EXPECT_EQ(data::sequential_batches(*tokens, 4, 8, 100).size(), 3u);
  EXPECT_EQ(data::sequential_batches(*tokens, 4, 8, INT64_MAX).size(), 3u);
  EXPECT_EQ(data::sequential_batches(*tokens, 11, 8).size(), 1u);
  EXPECT_TRUE(data::sequential_batches(*tokens, 1, 100).empty());
  EXPECT_EQ(data::sequential_batches(*tokens, 1, 99).size(), 1u);
  expect_error([&] { data::sequential_batches(*tokens, 0, 8); }, ErrorKind::Range,
               "sequential_batches: batch and seq");
  expect_error([&] { data::sequential_batches(*tokens, 1, 8, -1); }, ErrorKind::Range,
               "max_batches");
}
