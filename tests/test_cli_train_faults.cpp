// `forge train` under faults and bad input (the binary, FORGE_BINARY): SIGINT saves a
// checkpoint that resumes bit for bit, a second signal exits at once, kills during saves and
// a full disk leave a resumable folder, and bad hyperparameters, data and resumes are
// refused with one `error:` line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "ci.h"
#include "cli_runner.h"
#include "cli_train_test_util.h"

namespace {

using namespace forge::test::cli_train;
using forge::test::spawn_forge;
using forge::test::unprivileged_wrapper;
using forge::test::wait_for;

std::vector<std::string> long_run_args(const fs::path& out, const std::string& save_every) {
  return {"train", "--data",       g_text.string(), "--out",        out.string(), "--tokenizer",
          "char",  "--preset",     "tiny",          "--batch",      "4",          "--seq",
          "16",    "--steps",      "1000000",       "--eval-every", "0",          "--sample-every",
          "0",     "--save-every", save_every,      "--threads",    "2"};
}

TEST_F(CliTrain, SigintSavesACheckpointThatResumes) {
  const fs::path out = fresh_dir("sigint");
  const fs::path err = g_root / "sigint.err";
  const pid_t pid = spawn_forge(long_run_args(out, "0"), err);
  ASSERT_TRUE(wait_for_metrics(out, 3)) << slurp(err);
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_for(pid, 60), 128 + SIGINT) << slurp(err);
  const std::string e = slurp(err);
  std::smatch mm;
  ASSERT_TRUE(
      std::regex_search(e, mm, std::regex("stopped at step (\\d+) of 1000000 \\(SIGINT\\)")))
      << e;
  const size_t k = std::stoul(mm[1]);
  EXPECT_EQ(read_metrics(out).size(), k);
  ASSERT_TRUE(fs::exists(out / "train_state.safetensors"));
  // No temp file is left behind.
  for (const auto& f : fs::directory_iterator(out))
    EXPECT_EQ(f.path().filename().string().find(".tmp."), std::string::npos) << f.path();

  const CliResult r =
      run_forge("train --out " + out.string() + " --resume --stop-after 2 --threads 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(parse_json(r)["steps"], k + 2);
  const std::vector<json> m = read_metrics(out);
  ASSERT_EQ(m.size(), k + 2);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"], i + 1);
}

TEST_F(CliTrain, SecondSignalExitsAtOnceLeavingAResumableCheckpoint) {
  const fs::path out = fresh_dir("sigint2");
  const fs::path err = g_root / "sigint2.err";
  const pid_t pid = spawn_forge(long_run_args(out, "1"), err);  // saving every step
  ASSERT_TRUE(wait_for_metrics(out, 3)) << slurp(err);
  ::kill(pid, SIGINT);
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_for(pid, 60), 128 + SIGINT) << slurp(err);
  const CliResult r =
      run_forge("train --out " + out.string() + " --resume --stop-after 1 --threads 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  // Steps continue after the checkpoint the state file holds.
  const std::vector<json> m = read_metrics(out);
  ASSERT_FALSE(m.empty());
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"], i + 1);
}

TEST_F(CliTrain, KillDuringSavesLeavesAResumableFolder) {
  const fs::path out = fresh_dir("sigkill");
  const fs::path err = g_root / "sigkill.err";
  const pid_t pid = spawn_forge(long_run_args(out, "1"), err);  // saving after every step
  ASSERT_TRUE(wait_for_metrics(out, 5)) << slurp(err);
  ::kill(pid, SIGKILL);  // most of the time is spent saving: likely mid-write
  EXPECT_EQ(wait_for(pid, 60), 128 + SIGKILL);
  // The model folder loads, and the state resumes (removing any temp file left behind).
  const CliResult g =
      run_forge("generate -m " + out.string() + " --prompt-ids 1,2 -n 2 --greedy --json");
  EXPECT_EQ(g.code, 0) << g.err;
  const CliResult r =
      run_forge("train --out " + out.string() + " --resume --stop-after 1 --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& f : fs::directory_iterator(out))
    EXPECT_EQ(f.path().filename().string().find(".tmp."), std::string::npos) << f.path();
  const std::vector<json> m = read_metrics(out);
  ASSERT_FALSE(m.empty());
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"], i + 1);
}

TEST_F(CliTrain, DiskFullWhileSavingKeepsThePreviousCheckpoint) {
  const fs::path full = fresh_dir("dfull_ref"), out = fresh_dir("dfull");
  ASSERT_EQ(run_forge(tiny_args(full)).code, 0);
  ASSERT_EQ(run_forge(tiny_args(out, "--stop-after 4")).code, 0);
  const std::string state = slurp(out / "train_state.safetensors");
  const std::string model = slurp(out / "model.safetensors");
  ASSERT_GT(state.size(), 100000u);
  // Files may grow to 64 blocks (32 or 64 KiB) at most: metrics and the plot fit, the
  // training state (~1 MB) does not. SIGXFSZ ignored, so the write fails with EFBIG.
  const CliResult r = run_forge("train --out " + out.string() + " --resume --threads 2", "",
                                "ulimit -f 64; trap '' XFSZ;");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("\nerror: "), std::string::npos) << r.err;
  EXPECT_EQ(read_metrics(out).size(), 8u);  // it did train to the end, and failed saving
  EXPECT_TRUE(slurp(out / "train_state.safetensors") == state);
  EXPECT_TRUE(slurp(out / "model.safetensors") == model);
  // The surviving checkpoint resumes to exactly the uninterrupted run.
  const CliResult again = run_forge("train --out " + out.string() + " --resume --threads 2");
  ASSERT_EQ(again.code, 0) << again.err;
  expect_same_run(result_of(full), result_of(out));
}

// The output folder turns read-only during a run that saves every step: the next save fails
// with one error line, and the last checkpoint before it resumes.
TEST_F(CliTrain, ReadOnlyFolderWhileSavingKeepsThePreviousCheckpoint) {
  const fs::path out = fresh_dir("readonly");
  const fs::path err = g_root / "readonly.err";
  if (::geteuid() == 0) {  // the child runs as nobody: the folder is its own until chmod
    ASSERT_EQ(::chown(out.c_str(), 65534, 65534), 0);
    ASSERT_EQ(::chmod(g_root.c_str(), 0755), 0);
  }
  const pid_t pid = spawn_forge(long_run_args(out, "1"), err, unprivileged_wrapper());
  ASSERT_TRUE(wait_for_metrics(out, 3)) << slurp(err);
  ASSERT_EQ(::chmod(out.c_str(), 0555), 0);
  EXPECT_EQ(wait_for(pid, 60), 1) << slurp(err);
  const std::string e = slurp(err);
  EXPECT_NE(e.find("\nerror: "), std::string::npos) << e;
  EXPECT_NE(e.find(out.string()), std::string::npos) << e;
  EXPECT_NE(e.find("Permission denied"), std::string::npos) << e;
  ASSERT_EQ(::chmod(out.c_str(), 0755), 0);
  const CliResult r =
      run_forge("train --out " + out.string() + " --resume --stop-after 1 --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> m = read_metrics(out);
  ASSERT_FALSE(m.empty());
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"], i + 1);
}

TEST_F(CliTrain, RejectsBadHyperparameters) {
  const fs::path out = g_root / "bad_hyper";
  expect_error(tiny_args(out, "--lr -1"), "--lr");
  expect_error(tiny_args(out, "--dropout 1"), "--dropout");
  expect_error(tiny_args(out, "--micro-batch 3"), "--micro-batch");
  expect_error(tiny_args(out, "", 0), "--steps");
  expect_error(tiny_args(out, "--val-fraction 0.9"), "--val-fraction");
  std::string long_seq = tiny_args(out);
  long_seq.replace(long_seq.find("--seq 16"), 8, "--seq 65");  // tiny's context is 64
  expect_error(long_seq, "--seq 65");
  expect_error(tiny_args(out, "--clip -1"), "--clip");
  expect_error(tiny_args(out, "--weight-decay -0.5"), "--weight-decay");
  expect_error(tiny_args(out, "--batch abc"), "--batch");
  expect_error(tiny_args(out, "--embd 30 --heads 4"), "--embd 30");
  expect_error(tiny_args(out, "--precision fp16"), "--precision");
  expect_error(tiny_args(out, "--precision tf32"),
               "device cpu multiplies in fp32 only: precision tf32 needs");
  expect_error(tiny_args(out, "--precision bf16"),
               "device cpu multiplies in fp32 only: precision bf16 needs");
  expect_error(tiny_args(out, "--sum-timeline " + (g_root / "t.json").string()),
               "--sum-timeline times the NCCL sums of a data-parallel run on cuda devices");
  EXPECT_FALSE(fs::exists(out / "train_state.safetensors"));
}

TEST_F(CliTrain, RejectsBadData) {
  const fs::path dir = fresh_dir("bad_data");
  const std::string common = " --tokenizer char --preset tiny --batch 4 --seq 16 --steps 2 ";
  expect_error(
      "train --data " + (dir / "missing.txt").string() + " --out " + (dir / "o1").string() + common,
      "missing.txt");
  write_bytes(dir / "empty.txt", "");
  expect_error(
      "train --data " + (dir / "empty.txt").string() + " --out " + (dir / "o2").string() + common,
      "holds no tokens");
  fs::create_directories(dir / "empty_folder");
  expect_error("train --data " + (dir / "empty_folder").string() + " --out " +
                   (dir / "o3").string() + common,
               "no .txt files");
  write_bytes(dir / "short.txt", std::string(40, 'a') + "bcd");
  expect_error("train --data " + (dir / "short.txt").string() + " --out " + (dir / "o4").string() +
                   common + " --val-fraction 0",
               "shorter than one batch");
  expect_error("train --out " + (dir / "o5").string() + common, "--data");
}

TEST_F(CliTrain, RejectsBadResumes) {
  const fs::path dir = fresh_dir("bad_resume");
  // No state at all.
  expect_error("train --out " + (dir / "none").string() + " --resume", "no training state");
  // A corrupt state.
  fs::create_directories(dir / "corrupt");
  write_bytes(dir / "corrupt" / "train_state.safetensors", "this is not a safetensors file");
  expect_error("train --out " + (dir / "corrupt").string() + " --resume", "not a usable");
  // A truncated state.
  const fs::path good = dir / "good";
  ASSERT_EQ(run_forge(tiny_args(good, "--stop-after 2")).code, 0);
  fs::create_directories(dir / "truncated");
  const std::string state = slurp(good / "train_state.safetensors");
  write_bytes(dir / "truncated" / "train_state.safetensors", state.substr(0, state.size() / 2));
  expect_error("train --out " + (dir / "truncated").string() + " --resume", "train_state");
  // Options that change the trajectory must match the checkpoint.
  const std::string resume = "train --out " + good.string() + " --resume ";
  expect_error(resume + "--lr 1e-3", "--lr");
  expect_error(resume + "--layers 3", "--layers");
  expect_error(resume + "--batch 8", "--batch");
  expect_error(resume + "--steps 9", "--steps");
  expect_error(resume + "--precision bf16", "--precision \"bf16\" does not match");
  // Different data.
  write_bytes(dir / "other.txt", generated_text() + "different text at the end");
  expect_error("train --out " + good.string() + " --resume --data " + (dir / "other.txt").string(),
               "data does not match");
  // A fresh run into a folder that holds one.
  expect_error(tiny_args(good), "--resume");
  // The state survives all of this and still resumes.
  const CliResult r = run_forge("train --out " + good.string() + " --resume --threads 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(parse_json(r)["steps"], 8);
}

// A state file from before --precision (its settings lack the key) resumes as fp32, to the
// same end as an uninterrupted run.
TEST_F(CliTrain, StateFromBeforePrecisionResumesAsFp32) {
  const fs::path dir = fresh_dir("no_precision");
  const fs::path full = dir / "full", out = dir / "out";
  ASSERT_EQ(run_forge(tiny_args(full)).code, 0);
  ASSERT_EQ(run_forge(tiny_args(out, "--stop-after 3")).code, 0);
  // Blank the key out of the settings JSON inside the header (same length: the file stays
  // valid; the settings are a JSON string inside the metadata, so its quotes are escaped).
  std::string state = slurp(out / "train_state.safetensors");
  const std::string key = "\\\"precision\\\":\\\"fp32\\\",";
  const size_t at = state.find(key);
  ASSERT_NE(at, std::string::npos) << "the settings' precision key";
  state.replace(at, key.size(), std::string(key.size(), ' '));
  write_bytes(out / "train_state.safetensors", state);
  const CliResult r = run_forge("train --out " + out.string() + " --resume --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_run(result_of(full), result_of(out));
}

}  // namespace
