// A weights file that shrinks while forge has it mapped without a copy (forge/mapped_files.h):
// reads of the vanished pages give zeros instead of SIGBUS, and the next check (a load, a
// generated token, an evaluation, a training step) reports the file. Truncated during
// loading (library calls, deterministic) and during generation (the CLI, a child process);
// a file replaced by rename during generation changes nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "cli_runner.h"
#include "forge/error.h"
#include "forge/gguf.h"
#include "forge/gpt2.h"
#include "forge/mapped_files.h"
#include "forge/safetensors.h"
#include "forge/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace forge;
using forge::test::CliResult;
using forge::test::run_forge;
using forge::test::slurp;

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("forge_mapped_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void expect_shrank_error(const std::string& path) {
  try {
    check_mapped_files();
    ADD_FAILURE() << "check_mapped_files() did not report " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find(path + ": the file shrank"), std::string::npos)
        << e.what();
  }
}

TEST(MappedFileFaults, ZeroCopyTensorOfATruncatedFileReadsZerosAndIsReported) {
  const std::string path = (scratch("zero_copy") / "w.safetensors").string();
  const std::vector<float> values(1 << 16, 1.5f);  // 256 KiB: many pages
  save_safetensors(path, {{"w", Tensor::from_vector(values, {1 << 16})}});
  {
    const SafeTensorsFile file = SafeTensorsFile::open(path);
    const Tensor w = file.load("w");  // aliases the mapping
    EXPECT_NO_THROW(check_mapped_files());
    ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
    const std::vector<float> read = w.to_vector<float>();  // SIGBUS without the guard
    EXPECT_EQ(read.back(), 0.0f);                          // a vanished page reads zeros
    expect_shrank_error(path);
  }
  // Unmapped: nothing is in use any more.
  EXPECT_NO_THROW(check_mapped_files());
}

TEST(MappedFileFaults, CopyingLoadOfATruncatedFileThrows) {
  const std::string path = (scratch("copying") / "w.safetensors").string();
  std::vector<uint16_t> halves(1 << 17, 0x3c00);  // F16 ones: loading widens (a copy)
  save_safetensors(
      path, {{"h", Tensor::from_bytes(halves.data(), halves.size() * 2, {1 << 17}, DType::F16)}});
  const SafeTensorsFile file = SafeTensorsFile::open(path);
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  try {
    file.load("h");
    ADD_FAILURE() << "loading from the truncated file did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the file shrank"), std::string::npos) << e.what();
  }
}

TEST(MappedFileFaults, ZeroCopyGgufTensorOfATruncatedFileIsReported) {
  const fs::path dir = scratch("gguf");
  gpt2::Config c = gpt2::Config::preset("tiny");
  const std::string path = (dir / "m.gguf").string();
  gpt2::Model::random(c, 3).save_gguf(path, Tokenizer());
  const gguf::File file = gguf::File::open(path);
  const Tensor wte = file.load("token_embd.weight");  // zero-copy
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(file.data_offset())), 0);
  EXPECT_EQ(wte.to_vector<float>()[0], 0.0f);
  expect_shrank_error(path);
}

// A model whose generation takes a while: 2 layers of 64, 1024 positions, a 64-character
// vocabulary without an end token.
fs::path slow_model(const std::string& name) {
  const fs::path dir = scratch(name);
  std::string symbols;
  for (char ch = '0'; symbols.size() < 64; ++ch) symbols += ch;
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.n_ctx = 1024;
  c.vocab_size = 64;
  c.bos_id = c.eos_id = -1;
  gpt2::Model::random(c, 11).save(dir.string());
  Tokenizer::build_char(symbols).save(dir.string());
  return dir;
}

/// Generates 1000 tokens from `dir` in a child; once it has printed some text, `meddle()`.
/// Returns the exit code; `out` gets stdout, `err` stderr.
template <class Meddle>
int generate_and_meddle(const fs::path& dir, const fs::path& out, const fs::path& err,
                        Meddle meddle) {
  const pid_t pid = forge::test::spawn_forge(
      {"generate", "-m", dir.string(), "-p", "0", "-n", "1000", "--greedy", "--threads", "1"}, err,
      {}, out);
  std::error_code ec;  // the child creates `out`: absent at first
  for (int i = 0; i < 60000 && (fs::file_size(out, ec) < 16 || ec); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  meddle();
  return forge::test::wait_for(pid, 120);
}

TEST(MappedFileFaults, GenerationFromAWeightsFileTruncatedMidwayFailsCleanly) {
  const fs::path dir = slow_model("generate_truncated");
  const fs::path out = dir / "out.txt", err = dir / "err.txt";
  const std::string weights = (dir / "model.safetensors").string();
  const int code =
      generate_and_meddle(dir, out, err, [&] { ASSERT_EQ(::truncate(weights.c_str(), 4096), 0); });
  const std::string e = slurp(err);
  EXPECT_EQ(code, 1) << e;  // not 128 + SIGBUS
  EXPECT_NE(e.find("error: " + weights + ": the file shrank"), std::string::npos) << e;
}

TEST(MappedFileFaults, WeightsReplacedByRenameMidwayChangeNothing) {
  const fs::path dir = slow_model("generate_renamed");
  const CliResult whole =
      run_forge("generate -m " + dir.string() + " -p 0 -n 1000 --greedy --threads 1");
  ASSERT_EQ(whole.code, 0) << whole.err;
  const fs::path out = dir / "out.txt", err = dir / "err.txt";
  const fs::path other = scratch("other_weights");
  gpt2::Model::random(gpt2::Model::load(dir.string()).config(), 12).save(other.string());
  const int code = generate_and_meddle(dir, out, err, [&] {
    fs::rename(other / "model.safetensors", dir / "model.safetensors");  // as forge saves
  });
  EXPECT_EQ(code, 0) << slurp(err);
  EXPECT_EQ(slurp(out), whole.out);  // the old file stayed mapped
}

}  // namespace
