// GGUF files that must be refused (forge/gguf.h): every malformed header, value and tensor
// entry, huge counts in tiny files, fuzzed bytes; and the writer's refusals and failures.
#include "gguf_test_util.h"

namespace forge::test {
namespace {

using namespace gguf_tests;
using gguf::File;
using gguf::Metadata;
using gguf::NamedTensors;
using gguf::Value;
using gguf::ValueType;

// ---- rejections ---------------------------------------------------------------------------

TEST_F(Gguf, MinimalCraftedFileOpens) {
  // The positive control of the crafted files below.
  const std::string p = path("min.gguf");
  write_bytes(p, minimal_file());
  const File f = File::open(p);
  EXPECT_EQ(f.get_u32("a.b"), 7u);
  EXPECT_EQ(f.load("w").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(f.data_offset(), 96u);  // 24 + 19 (key, type, value) + 33 (tensor) = 76 -> 96
}

TEST_F(Gguf, RejectsBadMagicVersionAndUnreadableFiles) {
  expect_open_error(path("missing.gguf"), ErrorKind::Io, "No such file");
  expect_open_error(dir_.string(), ErrorKind::Io, "not a regular file");
  const std::string p = path("bad.gguf");
  std::string bytes = minimal_file();
  bytes[3] = 'G';
  write_bytes(p, bytes);
  expect_open_error(p, ErrorKind::Format,
                    "not a GGUF file: magic bytes 47 47 55 47, expected 47 47 55 46");
  write_bytes(p, "");
  expect_open_error(p, ErrorKind::Format, "truncated: magic at byte 0 needs 4 bytes");
  write_bytes(p, "GGU");
  expect_open_error(p, ErrorKind::Format, "truncated: magic");
  for (uint32_t v : {0u, 1u, 2u, 4u, 1000u}) {
    bytes = minimal_file();
    bytes[4] = static_cast<char>(v & 0xff);
    bytes[5] = static_cast<char>(v >> 8);
    write_bytes(p, bytes);
    expect_open_error(
        p, ErrorKind::Format,
        "GGUF version " + std::to_string(v) + " is not supported (forge reads version 3)");
  }
  write_bytes(p, Bytes().raw("GGUF").raw(std::string("\0\0\0\x03", 4)).u64(0).u64(0).s);
  expect_open_error(p, ErrorKind::Format, "a big-endian GGUF file");
  write_bytes(p, Bytes().raw("GGUF").u32(3).s);
  expect_open_error(p, ErrorKind::Format, "truncated: tensor_count at byte 8");
  write_bytes(p, Bytes().raw("GGUF").u32(3).u64(0).u32(0).s);
  expect_open_error(p, ErrorKind::Format, "truncated: metadata_kv_count at byte 16");
}

TEST_F(Gguf, RejectsEveryTruncation) {
  const std::string p = path("t.gguf");
  gguf::save(p, all_value_types(), all_dtypes());
  const std::string bytes = read_bytes(p);
  uint64_t end = 0;  // the last tensor byte: the padding after it may go
  {
    const File f = File::open(p);
    for (const auto& e : f.tensors()) end = std::max(end, e.offset + e.bytes);
  }
  ASSERT_LT(end, bytes.size());
  // Every length inside the header, and cuts into each tensor's data.
  std::vector<uint64_t> cuts;
  uint64_t header = 0;
  {
    const File f = File::open(p);
    header = f.data_offset();
    for (const auto& e : f.tensors()) {
      cuts.push_back(e.offset);
      cuts.push_back(e.offset + e.bytes - 1);
    }
  }
  for (uint64_t n = 0; n < header; ++n) cuts.push_back(n);
  const std::string q = path("cut.gguf");
  for (uint64_t n : cuts) {
    write_bytes(q, bytes.substr(0, n));
    try {
      File::open(q);
      ADD_FAILURE() << "a file cut to " << n << " of " << bytes.size() << " bytes opened";
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::Format) << e.what();
      ASSERT_EQ(std::string(e.what()).rfind("gguf: " + q + ": ", 0), 0u) << e.what();
    }
  }
  write_bytes(q, bytes.substr(0, end));
  EXPECT_NO_THROW(File::open(q));
  // Inside a value, and inside the tensor data.
  write_bytes(q, one_kv_file("k", 10, std::string(5, '\0')));
  expect_open_error(q, ErrorKind::Format, "truncated: key 'k' u64 at byte 37 needs 8 bytes");
  write_bytes(q, bytes.substr(0, end - 1));
  expect_open_error(q, ErrorKind::Format, "past the end of the file");
}

// Every case of a count or length far past the file's size: each must be refused before
// anything is allocated for it.
std::vector<std::pair<std::string, std::string>> huge_count_cases() {
  const uint64_t huge = uint64_t{1} << 62;
  return {
      {Bytes().head(huge, 0).zeros(64).s, "tensor_count 4611686018427387904 cannot fit"},
      {Bytes().head(0, huge).zeros(64).s, "metadata_kv_count 4611686018427387904 cannot fit"},
      {Bytes().head(0, 1).u64(huge).raw("abc").zeros(16).s, "key 0 at byte 24 has length"},
      {Bytes().head(0, 1).u64(~uint64_t{0}).zeros(16).s, "past the end of the file"},
      {one_kv_file("k", 8, Bytes().u64(huge).raw("x").s), "key 'k' string at byte 37 has length"},
      {one_kv_file("k", 9, Bytes().u32(10).u64(huge).zeros(16).s),
       "array of 4611686018427387904 u64 elements cannot fit in the 16 bytes left"},
      {one_kv_file("k", 9, Bytes().u32(0).u64(~uint64_t{0}).zeros(16).s), "u8 elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(8).u64(huge).zeros(16).s), "string elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(8).u64(1).u64(huge).s),
       "key 'k' element 0 at byte 49 has length"},
      {one_kv_file("k", 9, Bytes().u32(9).u64(huge).zeros(16).s), "array elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(9).u64(1).u32(9).u64(1).u32(12).u64(huge).s),
       "f64 elements cannot fit"},
      {Bytes().head(1, 0).u64(huge).zeros(40).s, "tensor name at byte 24 has length"},
      {Bytes().head(1, 0).str("w").u32(0x80000000u).zeros(40).s,
       "tensor 'w' has 2147483648 dimensions"},
      {tensors_file({{"w", {~uint64_t{0}, ~uint64_t{0}}, 0, 0}}, 64),
       "has more than 2^48 elements"},
      {tensors_file({{"w", {4}, 0, huge}}, 64), "past the end of the file"},
      // Counts an unchecked reader could allocate for (0.5 to 1 GiB) rather than refuse
      // at once: only the memory limit below tells these apart.
      {Bytes().head(0, uint64_t{1} << 23).zeros(64).s, "metadata_kv_count 8388608 cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(8).u64(uint64_t{1} << 25).zeros(16).s),
       "array of 33554432 string elements cannot fit"},
      {one_kv_file("k", 9, Bytes().u32(9).u64(uint64_t{1} << 23).zeros(16).s),
       "array of 8388608 array elements cannot fit"},
      {Bytes().head(uint64_t{1} << 23, 0).zeros(64).s, "tensor_count 8388608 cannot fit"},
  };
}

TEST_F(Gguf, RejectsHugeCountsInTinyFilesFastWithoutAllocating) {
  const auto cases = huge_count_cases();
  std::vector<std::string> paths;
  for (size_t i = 0; i < cases.size(); ++i) {
    paths.push_back(path("huge" + std::to_string(i) + ".gguf"));
    write_bytes(paths.back(), cases[i].first);
    ASSERT_LT(cases[i].first.size(), 200u);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    expect_open_error(paths[i], ErrorKind::Format, cases[i].second);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);

  // Again in a child process whose address space may grow by 256 MiB at most: an attempt to
  // allocate for any of these counts would fail there (bad_alloc, not forge::Error) or be
  // killed. AddressSanitizer reserves terabytes of shadow memory, so there the limit is not
  // set (the checks above still run).
#if defined(__SANITIZE_ADDRESS__)
  const bool limit = false;
#else
  const bool limit = true;
#endif
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(20);  // a hang fails too
    if (limit) {
      std::ifstream statm("/proc/self/statm");
      uint64_t pages = 0;
      statm >> pages;
      const uint64_t used = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
      const rlimit lim{used + (uint64_t{256} << 20), used + (uint64_t{256} << 20)};
      if (pages == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(100);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      try {
        File::open(paths[i]);
        ::_exit(static_cast<int>(1 + i));
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Format ||
            std::string(e.what()).find(cases[i].second) == std::string::npos)
          ::_exit(static_cast<int>(1 + i));
      } catch (...) {
        ::_exit(static_cast<int>(50 + i));  // bad_alloc and friends
      }
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "case index + 1 (or + 50: not a forge::Error)";
}

TEST_F(Gguf, RejectsBadKeys) {
  const std::string p = path("k.gguf");
  const std::string u32_7 = Bytes().u32(4).u32(7).s;
  write_bytes(p, Bytes().head(0, 1).str("").raw(u32_7).s);
  expect_open_error(p, ErrorKind::Format, "empty key at byte 24");
  for (const char* bad :
       {"\xff\xfe", "a\xc0\xaf", "\xed\xa0\x80", "\xe2\x98", "\xf4\x90\x80\x80"}) {
    write_bytes(p, Bytes().head(0, 1).str(bad).raw(u32_7).s);
    expect_open_error(p, ErrorKind::Format, "key at byte 24 is not valid UTF-8");
  }
  write_bytes(p, Bytes().head(0, 1).str("\xe2\x98\x83.ok").raw(u32_7).s);  // valid UTF-8
  EXPECT_EQ(File::open(p).get_u32("\xe2\x98\x83.ok"), 7u);
  write_bytes(p, Bytes().head(0, 1).str(std::string(65536, 'k')).raw(u32_7).s);
  expect_open_error(p, ErrorKind::Format, "has 65536 bytes, over the 65535-byte limit");
  write_bytes(p, Bytes().head(0, 1).str(std::string(65535, 'k')).raw(u32_7).s);
  EXPECT_NO_THROW(File::open(p));
  write_bytes(p, Bytes().head(0, 3).kv_u32("a", 1).kv_u32("b", 2).kv_u32("a", 3).s);
  expect_open_error(p, ErrorKind::Format, "duplicate key 'a'");
}

TEST_F(Gguf, RejectsBadValues) {
  const std::string p = path("v.gguf");
  write_bytes(p, one_kv_file("k", 13, std::string(8, '\0')));
  expect_open_error(p, ErrorKind::Format, "key 'k' has unknown value type 13");
  write_bytes(p, one_kv_file("k", 0xffffffffu, std::string(8, '\0')));
  expect_open_error(p, ErrorKind::Format, "key 'k' has unknown value type 4294967295");
  write_bytes(p, one_kv_file("k", 9, Bytes().u32(99).u64(0).s));
  expect_open_error(p, ErrorKind::Format, "key 'k' array has unknown value type 99");
  write_bytes(p, one_kv_file("k", 7, "\x02"));
  expect_open_error(p, ErrorKind::Format, "key 'k': bool byte 2 is neither 0 nor 1");
  write_bytes(p, one_kv_file("k", 9, Bytes().u32(7).u64(3).raw(std::string("\x01\x00\x03", 3)).s));
  expect_open_error(p, ErrorKind::Format, "key 'k': bool element 2 is byte 3");
  // Arrays of arrays: 4 levels are read, 5 refused.
  Bytes four;
  four.u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(5).u64(1).u32(42);
  write_bytes(p, one_kv_file("k", 9, four.s));
  EXPECT_EQ(File::open(p).get("k"),
            Value::arrays({Value::arrays({Value::arrays({Value::i32s({42})})})}));
  write_bytes(p, one_kv_file("k", 9, Bytes().u32(9).u64(1).raw(four.s).s));
  expect_open_error(p, ErrorKind::Format,
                    "key 'k' element 0 element 0 element 0 element 0: arrays nested deeper than 4");
  // The alignment key: a u32 power of two.
  write_bytes(p, one_kv_file("general.alignment", 5, Bytes().u32(32).s));
  expect_open_error(p, ErrorKind::Format, "general.alignment is i32, expected u32");
  write_bytes(p, one_kv_file("general.alignment", 8, Bytes().str("32").s));
  expect_open_error(p, ErrorKind::Format, "general.alignment is string, expected u32");
  for (uint32_t a : {0u, 24u, 33u, 0xffffffffu}) {
    write_bytes(p, one_kv_file("general.alignment", 4, Bytes().u32(a).s));
    expect_open_error(p, ErrorKind::Format,
                      "general.alignment " + std::to_string(a) + " is not a power of two");
  }
  write_bytes(p, one_kv_file("general.alignment", 4, Bytes().u32(8).s));
  EXPECT_EQ(File::open(p).alignment(), 8u);
}

TEST_F(Gguf, RejectsBadTensorEntries) {
  const std::string p = path("e.gguf");
  auto expect = [&](const std::vector<Entry>& entries, size_t data, const std::string& what,
                    std::string_view kv = {}, uint64_t n_kv = 0) {
    write_bytes(p, tensors_file(entries, data, kv, n_kv));
    expect_open_error(p, ErrorKind::Format, what);
  };
  // Positive control: the same helper makes files that open.
  write_bytes(p, tensors_file({{"a", {8}, 0, 0}, {"b", {32, 2}, 8, 32}}, 32 + 68));
  EXPECT_EQ(File::open(p).tensors().size(), 2u);

  expect({{"w", {4}, 0, 0}, {"w", {4}, 0, 32}}, 64, "duplicate tensor name 'w'");
  expect({{"", {4}, 0, 0}}, 32, "empty tensor name at byte 24");
  expect({{"w\xff", {4}, 0, 0}}, 32, "tensor name at byte 24 is not valid UTF-8");
  expect({{"w", {}, 0, 0}}, 32, "tensor 'w' has 0 dimensions (1 to 4 allowed)");
  expect({{"w", {1, 1, 1, 1, 1}, 0, 0}}, 32, "tensor 'w' has 5 dimensions");
  write_bytes(p, tensors_file({{"w", {1, 1, 1, 1}, 0, 0}}, 32));
  EXPECT_EQ(File::open(p).load("w").shape(), Shape({1, 1, 1, 1}));
  expect({{"w", {4, 0}, 0, 0}}, 32, "tensor 'w' has a dimension of 0 (ne [4, 0])");
  expect({{"w", {uint64_t{1} << 40, uint64_t{1} << 9}, 0, 0}}, 32, "more than 2^48 elements");
  expect({{"w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0}}, 32, "more than 2^48 elements");
  for (uint32_t type : {4u, 5u, 9u, 31u, 40u, 1000u})
    expect({{"w", {256}, type, 0}}, 1024,
           "tensor 'w' has unknown ggml type " + std::to_string(type));
  expect({{"w", {48}, 8, 0}}, 64, "tensor 'w': ne[0] = 48 is not a multiple of Q8_0's block of 32");
  expect({{"w", {16, 2}, 2, 0}}, 64, "ne[0] = 16 is not a multiple of Q4_0's block of 32");
  expect({{"w", {128}, 12, 0}}, 256, "ne[0] = 128 is not a multiple of Q4_K's block of 256");
  // A block dimension other than ne[0] need not be whole blocks.
  write_bytes(p, tensors_file({{"w", {32, 3}, 8, 0}}, 3 * 34));
  EXPECT_EQ(File::open(p).load("w").shape(), Shape({3, 32}));
  expect({{"w", {4}, 0, 4}}, 64, "tensor 'w': offset 4 is not a multiple of the alignment 32");
  // With alignment 8, offset 8 is fine and 4 is not.
  const std::string a8 = Bytes().kv_u32("general.alignment", 8).s;
  write_bytes(p, tensors_file({{"w", {4}, 0, 8}}, 64, a8, 1, 8));
  EXPECT_EQ(File::open(p).tensor("w")->offset % 8, 0u);
  write_bytes(p, tensors_file({{"w", {4}, 0, 4}}, 64, a8, 1, 8));
  expect_open_error(p, ErrorKind::Format, "offset 4 is not a multiple of the alignment 8");
  // Data past the end: by one byte, by a huge offset, by a huge size.
  expect({{"w", {4}, 0, 0}}, 15, "tensor 'w': 16 bytes at offset 0 of the data section (byte 64)");
  expect({{"w", {4}, 0, 0}}, 15, "past the end of the file");
  expect({{"w", {4}, 0, uint64_t{1} << 63}}, 16, "past the end of the file");
  expect({{"w", {uint64_t{1} << 24, uint64_t{1} << 24}, 0, 0}}, 16, "past the end of the file");
  // Overlaps: the same offset, partial overlap, overlap out of entry order.
  expect({{"a", {4}, 0, 0}, {"b", {4}, 0, 0}}, 64, "tensors 'a' and 'b' overlap");
  expect({{"a", {16}, 0, 0}, {"b", {4}, 0, 32}}, 64, "tensors 'a' and 'b' overlap: bytes [");
  expect({{"b", {4}, 0, 64}, {"c", {4}, 0, 96}, {"a", {24}, 0, 0}}, 128,
         "tensors 'a' and 'b' overlap");
  // Back to back with no gap is fine.
  write_bytes(p, tensors_file({{"a", {8}, 0, 0}, {"b", {8}, 0, 32}}, 64));
  EXPECT_NO_THROW(File::open(p));
}

TEST_F(Gguf, FuzzedFilesFailCleanly) {
  const std::string p = path("f.gguf");
  gguf::save(p, all_value_types(), all_dtypes());
  const std::string good = read_bytes(p);
  uint64_t header = 0;
  {
    const File f = File::open(p);
    header = f.data_offset();
  }
  std::mt19937 rng(7);
  int rejected = 0, opened = 0;
  for (int it = 0; it < 1000; ++it) {
    std::string bad = good;
    if (it % 3 == 2) {
      bad.resize(rng() % bad.size());
    } else {  // flip a few bytes of the header (counts, lengths, types, offsets)
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k)
        bad[rng() % header] = static_cast<char>(rng());
    }
    write_bytes(p, bad);
    try {
      const File f = File::open(p);
      for (const auto& e : f.tensors())
        if (e.loadable()) f.load(e.name);
      for (const auto& [k, v] : f.metadata()) (void)v.describe();
      ++opened;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("gguf: " + p + ": ", 0), 0u) << e.what();
      EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 700);
  EXPECT_GT(opened, 0);  // flips inside string values or padding leave a valid file
}

// ---- writer errors ------------------------------------------------------------------------

TEST_F(Gguf, SaveRejectsBadInputs) {
  const std::string p = path("w.gguf");
  const Tensor t = Tensor::zeros({4});
  auto expect = [&](const Metadata& meta, const NamedTensors& ts, const std::string& what,
                    uint32_t alignment = 32) {
    expect_error([&] { gguf::save(p, meta, ts, alignment); }, ErrorKind::Format, what,
                 "gguf: " + p + ": ");
  };
  expect({}, {{"a", t}, {"a", t}}, "duplicate tensor name 'a'");
  expect({}, {{"", t}}, "empty tensor name");
  expect({}, {{"a\xff", t}}, "tensor name 'a\xff' is not valid UTF-8");
  expect({}, {{std::string(64, 'n'), t}}, "has 64 bytes, over ggml's limit of 63");
  expect({}, {{"a", Tensor()}}, "tensor 'a' is undefined");
  expect({}, {{"ids", Tensor::from_vector(std::vector<uint32_t>{1, 2}, {2})}},
         "tensor 'ids' is u32, which ggml has no tensor type for");
  expect({}, {{"s", Tensor::from_vector(std::vector<float>{2.5f}, Shape{})}},
         "tensor 's' has rank 0");
  expect({}, {{"r5", Tensor::zeros({1, 1, 1, 1, 2})}}, "tensor 'r5' has rank 5");
  expect({}, {{"e", Tensor::zeros({0, 3})}}, "tensor 'e' has a dimension of 0 (shape [0, 3])");
  expect({{"k", Value::u8(1)}, {"k", Value::u8(2)}}, {}, "duplicate key 'k'");
  expect({{"", Value::u8(1)}}, {}, "empty key");
  expect({{"k\xc3", Value::u8(1)}}, {}, "key 'k\xc3' is not valid UTF-8");
  expect({{std::string(65536, 'k'), Value::u8(1)}}, {}, "over the 65535-byte limit");
  expect({}, {{"a", t}}, "alignment 24 is not a power of two", 24);
  expect({}, {{"a", t}}, "alignment 0 is not a power of two", 0);
  expect({{"general.alignment", Value::u32(64)}}, {{"a", t}},
         "general.alignment in the metadata is u32 64, but the alignment is u32 32");
  expect({{"general.alignment", Value::u64(32)}}, {{"a", t}},
         "general.alignment in the metadata is u64 32");
  EXPECT_FALSE(fs::exists(p));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 0);
  EXPECT_EQ(gguf::ggml_type_of(DType::Q8_0), 8u);
  EXPECT_EQ(gguf::dtype_of_ggml(30), DType::BF16);
  EXPECT_EQ(gguf::dtype_of_ggml(12), std::nullopt);
  expect_error([] { gguf::ggml_type_of(DType::U32); }, ErrorKind::Format, "no ggml tensor type");
  // Missing folders and a target that cannot be replaced are Io errors.
  expect_error(
      [&] {
        gguf::save(path("no/such/dir/w.gguf"), {}, {{"a", t}});
      },
      ErrorKind::Io, "cannot create", "gguf: " + path("no/such/dir/w.gguf") + ": ");
  expect_error([&] { gguf::save(dir_.string(), {}, {{"a", t}}); }, ErrorKind::Io, "cannot rename");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 0);
}

// Runs f with the effective user id of "nobody" when running as root, for whom permission
// bits do not bind (the saved user id stays root, so it is restored afterwards).
void as_unprivileged(const std::function<void()>& f) {
  const uid_t euid = ::geteuid();
  if (euid != 0) return f();
  ASSERT_EQ(::seteuid(65534), 0);
  struct Restore {
    ~Restore() { (void)::seteuid(0); }
  } restore;
  f();
}

TEST_F(Gguf, SaveIntoUnwritableFolderLeavesOldFileIntact) {
  const std::string p = path("old.gguf");
  gguf::save(p, {{"v", Value::u32(1)}},
             {{"w", Tensor::from_vector(std::vector<float>{1, 2}, {2})}});
  const std::string before = read_bytes(p);
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  bool threw_io = false;
  std::string msg;
  as_unprivileged([&] {
    try {
      gguf::save(p, {{"v", Value::u32(2)}}, {{"w", Tensor::zeros({8})}});
    } catch (const Error& e) {
      threw_io = e.kind() == ErrorKind::Io;
      msg = e.what();
    }
  });
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
  EXPECT_TRUE(threw_io) << msg;
  EXPECT_NE(msg.find("gguf: " + p + ": cannot create"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(File::open(p).get_u32("v"), 1u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
}

// A full disk, simulated with RLIMIT_FSIZE (writes past the limit fail with EFBIG once
// SIGXFSZ is ignored): the save throws Error(Io), the old file survives, no temp file stays.
TEST_F(Gguf, FailedWriteKeepsOldFileAndRemovesTemp) {
  const std::string p = path("full.gguf");
  gguf::save(p, {}, {{"old", Tensor::from_vector(std::vector<float>{1, 2}, {2})}});
  const std::string before = read_bytes(p);
  const Tensor big = Tensor::zeros({1 << 18});  // 1 MiB

  const std::string msg = io_error_past_file_limit([&] { gguf::save(p, {}, {{"new", big}}); });
  EXPECT_FALSE(msg.empty()) << "no Error(Io)";
  EXPECT_NE(msg.find("write failed"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
  EXPECT_EQ(File::open(p).load("old").to_vector<float>(), (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace forge::test
