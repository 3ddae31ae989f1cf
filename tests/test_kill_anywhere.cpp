// Kill at any instant: SIGKILL lands at random instants of `forge train` (saving every step),
// and the run, resumed after each kill, ends exactly where one uninterrupted run ends; kills
// during `forge quantize` and during the tokenization into tokens.bin leave each output
// complete and valid, or absent; and no temp file outlives the next start.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "cli_runner.h"
#include "cli_train_test_util.h"
#include "forge/data.h"
#include "forge/gpt2.h"

namespace {

using namespace forge::test::cli_train;
using forge::test::spawn_forge;
using forge::test::split_args;
using forge::test::wait_for;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// The names of the "<file>.tmp.<pid>" files in `dir` (io::AtomicFile's writes in progress).
std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().find(".tmp.") != std::string::npos)
      found.push_back(f.path().filename().string());
  return found;
}

size_t metrics_lines(const fs::path& out) {
  const std::string m = slurp(out / "metrics.jsonl");
  return static_cast<size_t>(std::count(m.begin(), m.end(), '\n'));
}

/// Waits until metrics.jsonl holds more than `lines` lines (true) or the child exits (false,
/// its status in `code`), at most 120 s.
bool wait_for_new_step(pid_t pid, const fs::path& out, size_t lines, int& code) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < 120) {
    if (metrics_lines(out) > lines) return true;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  code = wait_for(pid, 0);
  return false;
}

/// A run of `steps` that saves after every step, with dropout (its masks must resume too).
std::string saving_run(const fs::path& out, int steps) {
  return "train --data " + g_text.string() + " --out " + out.string() +
         " --tokenizer char --preset tiny --batch 4 --seq 16 --steps " + std::to_string(steps) +
         " --warmup 2 --lr 3e-3 --dropout 0.1 --eval-every 8 --eval-batches 2 --sample-every 0"
         " --save-every 1 --threads 2";
}

TEST_F(CliTrain, KilledAtRandomInstantsEndsAsTheUninterruptedRun) {
  constexpr int kSteps = 64, kKills = 32;
  const fs::path ref = fresh_dir("kill_ref"), first = fresh_dir("kill_first");
  const fs::path out = fresh_dir("kill_any"), err = g_root / "kill_any.err";
  auto t0 = Clock::now();
  ASSERT_EQ(run_forge(saving_run(first, kSteps) + " --stop-after 1").code, 0);
  const double startup = seconds_since(t0);  // start, tokenize, one step, one save
  t0 = Clock::now();
  ASSERT_EQ(run_forge(saving_run(ref, kSteps)).code, 0);
  const double step = std::max(1e-3, (seconds_since(t0) - startup) / (kSteps - 1));

  // Each start dies at one of two kinds of instant: a quarter of them anywhere in the
  // start-up (loading, tokenizing, reading the state), the rest within two steps after the
  // process has finished a step (inside the save that follows it, or in the next step).
  std::mt19937_64 rng(20261205);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int kills = 0, kills_mid_save = 0, code = -1;
  bool finished = false;
  for (int start = 0; start < 400 && kills < kKills && !finished; ++start) {
    const bool resume = fs::exists(out / "train_state.safetensors");
    const size_t lines = metrics_lines(out);
    const pid_t pid =
        spawn_forge(split_args(saving_run(out, kSteps) + (resume ? " --resume" : "")), err);
    bool alive = true;
    if (unit(rng) < 0.25) {
      sleep_seconds(unit(rng) * startup);
    } else {
      alive = wait_for_new_step(pid, out, lines, code);
      if (alive) sleep_seconds(unit(rng) * 2 * step);
    }
    if (alive) {
      ::kill(pid, SIGKILL);
      code = wait_for(pid, 60);
    }
    if (code == 0) {
      finished = true;  // it ended before the kill
    } else {
      ASSERT_EQ(code, 128 + SIGKILL) << slurp(err);
      ++kills;
      if (!temp_files(out).empty()) ++kills_mid_save;
    }
  }
  EXPECT_GE(kills, kKills);
  std::printf("[ kills ] %d kills, %d of them with a write in progress\n", kills, kills_mid_save);
  if (!finished) {
    const CliResult r = run_forge(saving_run(out, kSteps) + " --resume");
    ASSERT_EQ(r.code, 0) << r.err;
  }
  EXPECT_EQ(temp_files(out), std::vector<std::string>{});
  expect_same_run(result_of(ref), result_of(out));
}

/// Runs `args` once to the end (the reference output and its time), then `kills` times
/// killed at an instant uniform over 1.2 x that time, then once more to the end. After each
/// run `check(reference)` looks at what it left: reference is true after the first run.
template <class Check>
void kill_at_random_instants(const std::string& args, const fs::path& err, int kills, uint64_t seed,
                             Check check) {
  auto t0 = Clock::now();
  const CliResult r = run_forge(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const double whole = seconds_since(t0);
  check(true);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> instant(0.0, 1.2 * whole);
  for (int k = 0; k < kills; ++k) {
    const pid_t pid = spawn_forge(split_args(args), err);
    sleep_seconds(instant(rng));
    ::kill(pid, SIGKILL);
    const int code = wait_for(pid, 120);
    ASSERT_TRUE(code == 0 || code == 128 + SIGKILL) << code << " " << slurp(err);
    check(false);
  }
  const CliResult last = run_forge(args);
  ASSERT_EQ(last.code, 0) << last.err;
  check(false);
}

TEST_F(CliTrain, KillingQuantizeLeavesTheFileCompleteOrAbsent) {
  REQUIRE_GPT2_TOKENIZER();
  const fs::path dir = fresh_dir("kill_quantize");
  // GPT-2's vocabulary, 2 layers of 64: a 14 MB model, a 4 MB q8_0 file.
  forge::gpt2::Config config = forge::gpt2::Config::preset("mini");
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 64;
  forge::gpt2::Model::random(config, 7).save((dir / "model").string());
  const fs::path gguf = dir / "small.gguf";
  const std::string args = "quantize -m " + (dir / "model").string() + " --tokenizer " +
                           kGpt2Tokenizer + " --type q8_0 -o " + gguf.string();
  std::string want;
  int complete = 0, absent = 0, mid_write = 0;
  kill_at_random_instants(args, g_root / "kill_quantize.err", 12, 99, [&](bool reference) {
    if (reference) want = slurp(gguf);
    if (!temp_files(dir).empty()) ++mid_write;  // killed while writing
    if (!fs::exists(gguf)) {
      ++absent;
      return;
    }
    ++complete;
    EXPECT_TRUE(slurp(gguf) == want) << "a killed quantize left a partial " << gguf;
    fs::remove(gguf);
  });
  std::printf("[ kills ] quantize: %d outputs complete, %d absent, %d kills mid-write\n", complete,
              absent, mid_write);
  // The last run removed what the killed ones left.
  EXPECT_EQ(temp_files(dir), std::vector<std::string>{});
}

TEST_F(CliTrain, KillingTokenizationLeavesTheCacheCompleteOrAbsent) {
  REQUIRE_GPT2_TOKENIZER();
  const fs::path dir = fresh_dir("kill_tokens");
  std::string text;
  while (text.size() < (2u << 20)) text += generated_text();  // 2 MiB: seconds of BPE
  write_bytes(dir / "text.txt", text);
  const fs::path out = dir / "run";
  const std::string args = "train --data " + (dir / "text.txt").string() + " --tokenizer " +
                           kGpt2Tokenizer + " --out " + out.string() +
                           " --preset mini --layers 1 --heads 2 --embd 32 --ctx 16 --batch 1"
                           " --seq 8 --steps 1 --eval-every 0"
                           " --sample-every 0 --save-every 0 --threads 2";
  std::vector<uint32_t> want;
  int complete = 0, absent = 0;
  kill_at_random_instants(args, dir / "kill_tokens.err", 10, 7, [&](bool reference) {
    const fs::path bin = out / "tokens.bin";
    if (reference) want = forge::data::read_token_file(bin.string());
    if (fs::exists(bin)) {
      ++complete;
      EXPECT_EQ(forge::data::read_token_file(bin.string()), want);
    } else {
      ++absent;
    }
    fs::remove_all(out);  // so that the next start tokenizes again
  });
  std::printf("[ kills ] tokens.bin: %d complete, %d absent\n", complete, absent);
}

}  // namespace
