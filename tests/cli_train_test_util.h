// What the `forge train` CLI test files share (test_cli_train.cpp,
// test_cli_train_faults.cpp, test_cli_train_mpi.cpp): the suite's temp folder and generated
// text, the fixture with the common tiny run, the metrics log (and waiting for it), the
// schedule written out, and run comparisons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ci.h"
#include "cli_runner.h"

namespace forge::test::cli_train {

namespace fs = std::filesystem;
using forge::test::CliResult;
using forge::test::parse_json;
using forge::test::run_forge;
using forge::test::slurp;
using nlohmann::json;

inline const std::string kGpt2Tokenizer = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";

using forge::test::under_ci;

inline fs::path g_root;

/// A fresh folder under the suite's temp root.
inline fs::path fresh_dir(const std::string& name) {
  const fs::path p = g_root / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

/// ~24 KB of text from a 12-word vocabulary picked by an LCG: learnable, deterministic.
inline std::string generated_text() {
  static const char* words[] = {"the", "state", "of",  "union", "is",     "strong",
                                "we",  "shall", "act", "now",   "people", "congress"};
  std::string s;
  uint64_t x = 12345;
  while (s.size() < 24000) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    s += words[(x >> 33) % 12];
    s += ((x >> 20) % 9 == 0) ? ".\n" : " ";
  }
  return s;
}

inline fs::path g_text;  // the generated text file

class CliTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!g_root.empty()) return;
    g_root = fs::path(::testing::TempDir()) / ("forge_cli_train_" + std::to_string(::getpid()));
    fs::create_directories(g_root);
    g_text = g_root / "text.txt";
    write_bytes(g_text, generated_text());
  }

  /// The common tiny run: 8 steps of 4 x 16 tokens, validation every 4 steps.
  static std::string tiny_args(const fs::path& out, const std::string& extra = "", int steps = 8) {
    return "train --data " + g_text.string() + " --out " + out.string() +
           " --tokenizer char --preset tiny --batch 4 --seq 16 --steps " + std::to_string(steps) +
           " --warmup 2 --lr 3e-3 --eval-every 4 --eval-batches 2 --sample-every 0"
           " --save-every 0 --threads 2 " +
           extra;
  }
};

/// Waits until OUT/metrics.jsonl holds at least `lines` lines (false after 60 s).
inline bool wait_for_metrics(const fs::path& out, size_t lines) {
  for (int i = 0; i < 6000; ++i) {
    const std::string m = slurp(out / "metrics.jsonl");
    if (static_cast<size_t>(std::count(m.begin(), m.end(), '\n')) >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

inline std::vector<json> read_metrics(const fs::path& out) {
  std::vector<json> v;
  std::ifstream f(out / "metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) v.push_back(json::parse(line));
  return v;
}

/// The learning rate of 1-based step k, written from the schedule's definition: linear
/// warmup over `warmup` steps, then a cosine from lr to lr / 10 at `steps`.
inline double expected_lr(int64_t k, double lr, int64_t warmup, int64_t steps) {
  const double s = static_cast<double>(k - 1);
  if (s < static_cast<double>(warmup)) return lr * (s + 1) / static_cast<double>(warmup);
  const double ratio = (s - warmup) / static_cast<double>(steps - warmup);
  const double pi = std::acos(-1.0);
  return 0.1 * lr + 0.5 * (1 + std::cos(pi * std::min(ratio, 1.0))) * (lr - 0.1 * lr);
}

struct RunResult {
  std::string model;
  std::vector<json> metrics;
};

inline RunResult result_of(const fs::path& out) {
  RunResult r{slurp(out / "model.safetensors"), read_metrics(out)};
  for (json& m : r.metrics) {
    m.erase("time");
    m.erase("tok_s");
  }
  return r;
}

inline void expect_same_run(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.metrics.size(), b.metrics.size());
  for (size_t i = 0; i < a.metrics.size(); ++i) EXPECT_EQ(a.metrics[i], b.metrics[i]) << i;
  EXPECT_FALSE(a.model.empty());
  EXPECT_TRUE(a.model == b.model) << "model.safetensors differ";
}

/// Runs forge and expects exit 1, a last stderr line "error: ..." containing `want`, and
/// nothing on stdout.
inline void expect_error(const std::string& args, const std::string& want,
                         const std::string& env = "") {
  const CliResult r = run_forge(args, env);
  EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
  // Progress lines may come first; the error is the last line.
  std::string last = r.err;
  if (!last.empty() && last.back() == '\n') last.pop_back();
  const size_t nl = last.rfind('\n');
  if (nl != std::string::npos) last = last.substr(nl + 1);
  EXPECT_EQ(last.rfind("error: ", 0), 0u) << args << "\n" << r.err;
  EXPECT_NE(last.find(want), std::string::npos)
      << args << "\nwanted: " << want << "\ngot: " << r.err;
  EXPECT_EQ(r.out, "") << args;
}

/// GPT-2's BPE files, or skip (fail under CI).
#define REQUIRE_GPT2_TOKENIZER()                                                              \
  do {                                                                                        \
    if (!fs::exists(kGpt2Tokenizer + "/encoder.json")) {                                      \
      if (under_ci()) FAIL() << "GPT-2 tokenizer files missing under CI: " << kGpt2Tokenizer; \
      GTEST_SKIP() << "GPT-2 tokenizer files missing; run scripts/fetch_tokenizer.sh";        \
    }                                                                                         \
  } while (0)

}  // namespace forge::test::cli_train
