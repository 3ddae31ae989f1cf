// `mpirun -np 2 forge train`: data parallelism on one machine through Debian's Open MPI.
// Two ranks train what one process trains with the same global batch (dropout on), their
// checkpoints resume on another rank count, a killed rank ends the job naming it, and
// SIGINT stops every rank at one step with one checkpoint. Skipped when forge was built
// without MPI or mpirun is missing (a failure under CI, whose setup installs both).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "cli_train_test_util.h"
#include "forge/safetensors.h"

namespace {

using namespace forge::test::cli_train;
using forge::test::spawn_forge;
using forge::test::split_args;
using forge::test::wait_for;

/// mpirun as a root user in a container needs: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) (set in the
/// environment, which mpirun passes on), no single-copy mechanism between ranks (containers
/// forbid the ptrace-based one), no core binding (2 ranks on a 2-core VM), oversubscription
/// allowed (a 1-core machine).
const char* kMpirun =
    "mpirun -np %d --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none ";

std::string mpirun(int ranks) {
  char buf[256];
  std::snprintf(buf, sizeof buf, kMpirun, ranks);
  return buf;
}

class CliTrainMpi : public CliTrain {
 protected:
  void SetUp() override {
#ifndef FORGE_HAVE_MPI
    if (under_ci()) FAIL() << "forge was built without MPI under CI (scripts/setup.sh installs it)";
    GTEST_SKIP() << "forge was built without MPI (libopenmpi-dev)";
#else
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
      if (under_ci()) FAIL() << "mpirun missing under CI (scripts/setup.sh installs openmpi-bin)";
      GTEST_SKIP() << "mpirun missing (openmpi-bin)";
    }
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
#ifdef __SANITIZE_ADDRESS__
    // The sanitizer pass: Open MPI keeps allocations until exit, which src/dist/lsan.supp
    // names by library. LeakSanitizer matches those names only with whole stacks (Open MPI's
    // libraries have no frame pointers) of modules still loaded: slow unwinding for the
    // ranks, and Open MPI's components never unloaded.
    const char* asan = std::getenv("ASAN_OPTIONS");
    ::setenv("ASAN_OPTIONS",
             ((asan != nullptr ? std::string(asan) + ":" : "") + "fast_unwind_on_malloc=0").c_str(),
             1);
    ::setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
#endif
#endif
  }

  /// 10 steps of 4 x 16 tokens with dropout; `ranks` 0 runs forge alone (no mpirun).
  static CliResult train(const fs::path& out, int ranks, const std::string& extra = "",
                         const std::string& dropout = "0.1") {
    const std::string args = "train --data " + g_text.string() + " --out " + out.string() +
                             " --tokenizer char --preset tiny --batch 4 --seq 16 --steps 10"
                             " --warmup 2 --lr 3e-3 --dropout " +
                             dropout +
                             " --eval-every 5 --eval-batches 2 --sample-every 0 --save-every 0"
                             " --threads 1 " +
                             extra;
    return run_forge(args, "", ranks > 0 ? mpirun(ranks) : "");
  }
};

/// Largest relative difference between two runs' losses (train and validation).
double loss_gap(const std::vector<json>& a, const std::vector<json>& b) {
  double gap = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    for (const char* key : {"loss", "val_loss"}) {
      EXPECT_EQ(a[i].contains(key), b[i].contains(key)) << i << " " << key;
      if (!a[i].contains(key) || !b[i].contains(key)) continue;
      const double x = a[i][key], y = b[i][key];
      gap = std::max(gap, std::abs(x - y) / std::abs(y));
    }
  return gap;
}

/// Largest difference between two model files' weights, relative to each tensor's largest
/// magnitude. Without the attention's key biases (the middle third of each c_attn.bias):
/// their gradient is exactly 0 in exact arithmetic (softmax ignores a shift that all keys
/// share), so in floats it is rounding noise, which AdamW's normalized step turns into
/// full-size updates; no two summation orders agree on those values, whatever the engine
/// (the losses, which they cannot change, are compared instead).
double weight_gap(const fs::path& a, const fs::path& b) {
  const auto fa = forge::SafeTensorsFile::open(a.string());
  const auto fb = forge::SafeTensorsFile::open(b.string());
  EXPECT_EQ(fa.names(), fb.names());
  double gap = 0;
  for (const std::string& name : fa.names()) {
    const std::vector<float> x = fa.load(name).to_vector<float>();
    const std::vector<float> y = fb.load(name).to_vector<float>();
    EXPECT_EQ(x.size(), y.size()) << name;
    const bool key_bias = name.ends_with("attn.c_attn.bias");
    double scale = 0, diff = 0;
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (key_bias && i >= x.size() / 3 && i < 2 * x.size() / 3) continue;
      scale = std::max(scale, std::abs(static_cast<double>(y[i])));
      diff = std::max(diff, std::abs(static_cast<double>(x[i]) - y[i]));
    }
    gap = std::max(gap, diff / std::max(scale, 1e-30));
  }
  return gap;
}

TEST_F(CliTrainMpi, TwoRanksTrainWhatOneProcessTrains) {
  // The same global batch of 4 sequences: one process, and 2 ranks of 2. Only the order of
  // the gradient sums differs (each rank sums its sequences, MPI adds the ranks'), so the
  // bound is float rounding: 1e-5 relative for the losses and the weights.
  const fs::path one = fresh_dir("mpi_one"), two = fresh_dir("mpi_two");
  const CliResult r1 = train(one, 0);
  ASSERT_EQ(r1.code, 0) << r1.err;
  const CliResult r2 = train(two, 2, "--json");
  ASSERT_EQ(r2.code, 0) << r2.err;
  // Rank 0 alone reports: one header, one JSON result.
  EXPECT_NE(r2.err.find("2 ranks x 1 thread"), std::string::npos) << r2.err;
  const json j = parse_json(r2);
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["steps"], 10);
  const std::vector<json> m1 = read_metrics(one), m2 = read_metrics(two);
  ASSERT_EQ(m2.size(), 10u);
  EXPECT_LE(loss_gap(m2, m1), 1e-5);
  EXPECT_LE(weight_gap(two / "model.safetensors", one / "model.safetensors"), 1e-5);
  // Dropout matters here: without it the losses differ from the run with it.
  const fs::path nodrop = fresh_dir("mpi_nodrop");
  ASSERT_EQ(train(nodrop, 2, "", "0").code, 0);
  EXPECT_GT(loss_gap(read_metrics(nodrop), m1), 1e-4);
}

TEST_F(CliTrainMpi, CheckpointsResumeOnAnotherRankCount) {
  const fs::path whole = fresh_dir("mpi_whole");
  ASSERT_EQ(train(whole, 2).code, 0);
  const RunResult want = result_of(whole);

  // 2 ranks, stopped after 4 steps, resumed on 2: bit for bit the uninterrupted run.
  const fs::path same = fresh_dir("mpi_same");
  ASSERT_EQ(train(same, 2, "--stop-after 4").code, 0);
  const CliResult rs =
      run_forge("train --out " + same.string() + " --resume --threads 1", "", mpirun(2));
  ASSERT_EQ(rs.code, 0) << rs.err;
  expect_same_run(result_of(same), want);

  // 2 ranks -> 1 process, and 1 process -> 2 ranks: the same run up to float rounding.
  const fs::path down = fresh_dir("mpi_down"), up = fresh_dir("mpi_up");
  ASSERT_EQ(train(down, 2, "--stop-after 4").code, 0);
  const CliResult rd = run_forge("train --out " + down.string() + " --resume --threads 1");
  ASSERT_EQ(rd.code, 0) << rd.err;
  ASSERT_EQ(train(up, 0, "--stop-after 6").code, 0);
  const CliResult ru =
      run_forge("train --out " + up.string() + " --resume --threads 1", "", mpirun(2));
  ASSERT_EQ(ru.code, 0) << ru.err;
  for (const fs::path& out : {down, up}) {
    EXPECT_LE(loss_gap(read_metrics(out), want.metrics), 1e-5) << out;
    EXPECT_LE(weight_gap(out / "model.safetensors", whole / "model.safetensors"), 1e-5) << out;
  }
}

TEST_F(CliTrainMpi, BadSplitsAreRefusedByEveryRank) {
  const fs::path out = fresh_dir("mpi_bad");
  const CliResult r = run_forge("train --data " + g_text.string() + " --out " + out.string() +
                                    " --tokenizer char --preset tiny --batch 3 --seq 16 --steps 2"
                                    " --threads 1",
                                "", mpirun(2));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--batch 3 does not split over 2 ranks"), std::string::npos) << r.err;
  // A device without groups, and one GPU named for two ranks of a host.
  const std::string base = "train --data " + g_text.string() + " --out " + out.string() +
                           " --tokenizer char --preset tiny --batch 4 --seq 16 --steps 2";
  const CliResult vk = run_forge(base + " --device vulkan", "", mpirun(2));
  EXPECT_NE(vk.code, 0);
  EXPECT_NE(vk.err.find("on the CPU (MPI) or on cuda devices (NCCL), not on vulkan:0"),
            std::string::npos)
      << vk.err;
  const CliResult one_gpu = run_forge(base + " --device cuda:0", "", mpirun(2));
  EXPECT_NE(one_gpu.code, 0);
  EXPECT_NE(one_gpu.err.find("give --device cuda (rank r of a host takes cuda:r)"),
            std::string::npos)
      << one_gpu.err;
}

// The job's collectives on two ranks: this test binary, started by mpirun, runs
// DistJob.UnderMpirunBroadcastsAndSums on each rank (alone, that test skips).
TEST_F(CliTrainMpi, TheJobBroadcastsAndSumsAcrossRanks) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const CliResult r = forge::test::run_shell(
      mpirun(2) + self + " --gtest_color=no --gtest_filter=DistJob.UnderMpirun*");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // Each rank prints its own summary: two passes, no skip.
  size_t passed = 0;
  for (size_t at = r.out.find("[  PASSED  ] 1 test."); at != std::string::npos;
       at = r.out.find("[  PASSED  ] 1 test.", at + 1))
    ++passed;
  EXPECT_EQ(passed, 2u) << r.out;
  EXPECT_EQ(r.out.find("SKIPPED"), std::string::npos) << r.out;
}

/// The pids of `parent`'s children running forge (the ranks mpirun started).
std::vector<pid_t> ranks_of(pid_t parent) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");
    // pid (comm) state ppid ...
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && stat.find("(forge)") != std::string::npos)
      pids.push_back(static_cast<pid_t>(std::stol(name)));
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::vector<std::string> long_run(const fs::path& out) {
  return split_args(
      "-np 2 --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism "
      "none " FORGE_BINARY " train --data " +
      g_text.string() + " --out " + out.string() +
      " --tokenizer char --preset tiny --batch 4 --seq 16 --steps 1000000"
      " --eval-every 0 --sample-every 0 --save-every 2 --threads 1");
}

/// Starts mpirun with `args` (stdout to /dev/null, stderr to err).
pid_t spawn_mpirun(const std::vector<std::string>& args, const fs::path& err) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    std::vector<char*> argv{const_cast<char*>("mpirun")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp("mpirun", argv.data());
    ::_exit(127);
  }
  return pid;
}

TEST_F(CliTrainMpi, AKilledRankEndsTheJobAndTheCheckpointResumes) {
  const fs::path out = fresh_dir("mpi_kill");
  const fs::path err = g_root / "mpi_kill.err";
  const pid_t job = spawn_mpirun(long_run(out), err);
  ASSERT_TRUE(wait_for_metrics(out, 5)) << slurp(err);
  const std::vector<pid_t> ranks = ranks_of(job);
  ASSERT_EQ(ranks.size(), 2u) << "mpirun's forge children";
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(ranks[1], SIGKILL);
  const int code = wait_for(job, 30);  // -1 (and killed) after 30 s
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(code, -1) << "the job outlived its killed rank by 30 s\n" << slurp(err);
  EXPECT_NE(code, 0);
  EXPECT_LT(took, 30.0);
  // mpirun names the rank that died (Open MPI 4.1 may print its PID as 0).
  const std::string e = slurp(err);
  EXPECT_TRUE(std::regex_search(e, std::regex("process rank 1 with PID \\d+ .*signal 9"))) << e;
  // The last checkpoint resumes (on one process).
  const CliResult r = run_forge("train --out " + out.string() +
                                " --resume --stop-after 1 "
                                "--threads 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GE(parse_json(r)["steps"].get<int>(), 3);
}

TEST_F(CliTrainMpi, SigintStopsEveryRankAtOneStepWithOneCheckpoint) {
  const fs::path out = fresh_dir("mpi_sigint");
  const fs::path err = g_root / "mpi_sigint.err";
  std::vector<std::string> args = long_run(out);
  // mpirun passes SIGINT on as SIGTERM, and SIGKILLs the ranks this many seconds later
  // (the time to finish a step and save; mpirun waits all of it before it exits).
  args.insert(args.begin(), {"--mca", "odls_base_sigkill_timeout", "10"});
  const pid_t job = spawn_mpirun(args, err);
  ASSERT_TRUE(wait_for_metrics(out, 3)) << slurp(err);
  ::kill(job, SIGINT);
  const int code = wait_for(job, 60);
  EXPECT_NE(code, -1) << slurp(err);
  EXPECT_NE(code, 0);
  const std::string e = slurp(err);
  std::smatch mm;
  ASSERT_TRUE(
      std::regex_search(e, mm, std::regex("stopped at step (\\d+) of 1000000 \\(SIGTERM\\)")))
      << e;
  // Both ranks got the signal (each says so); rank 0 alone reported the stop.
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = e.find(what); at != std::string::npos; at = e.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("finishing this step, then saving"), 2u) << e;
  EXPECT_EQ(count("stopped at step"), 1u) << e;
  const size_t k = std::stoul(mm[1]);
  EXPECT_EQ(read_metrics(out).size(), k);
  // One checkpoint at step k, written by rank 0 alone (no temp files left).
  for (const auto& f : fs::directory_iterator(out))
    EXPECT_EQ(f.path().filename().string().find(".tmp."), std::string::npos) << f.path();
  const CliResult r = run_forge(
      "train --out " + out.string() + " --resume --stop-after 1 --threads 1 --json", "", mpirun(2));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(parse_json(r)["steps"], k + 1);
}

}  // namespace
