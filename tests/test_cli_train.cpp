// `forge train` end to end (the binary, FORGE_BINARY): checkpoints, bit-identical resume
// through --stop-after, metrics.jsonl and loss.svg, the --json summary, and `forge bench
// --preset`'s training figures. Signals, kills, a full disk and bad input:
// test_cli_train_faults.cpp.
//
// The model is the "tiny" preset with a character vocabulary of a generated text (fast: a
// few milliseconds per step), except where GPT-2's BPE files are the point.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ci.h"
#include "cli_runner.h"
#include "cli_train_test_util.h"
#include "forge/backend.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"

namespace {

using namespace forge::test::cli_train;

TEST_F(CliTrain, TrainsTinyModelWithMetricsPlotAndJson) {
  const fs::path out = fresh_dir("basic");
  const CliResult r = run_forge(tiny_args(out, "--json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  EXPECT_EQ(j["steps"], 8);
  EXPECT_EQ(j["checkpoint"], out.string());
  EXPECT_GT(j["tok_s"].get<double>(), 0);
  EXPECT_TRUE(j["val_loss"].is_number());
  EXPECT_EQ(j["settings"]["batch"], 4);
  EXPECT_EQ(j["settings"]["seq"], 16);
  EXPECT_EQ(j["settings"]["tokenizer"], "char");

  // The vocabulary is the text's distinct characters.
  const std::string text = generated_text();
  const std::set<char> chars(text.begin(), text.end());
  const auto cfg = forge::gpt2::Config::from_json_file((out / "config.json").string());
  EXPECT_EQ(cfg.vocab_size, static_cast<int64_t>(chars.size()));
  EXPECT_EQ(cfg.n_layer, 2);
  EXPECT_TRUE(fs::exists(out / "tokenizer_char.json"));
  EXPECT_TRUE(fs::exists(out / "train_state.safetensors"));

  const std::vector<json> m = read_metrics(out);
  ASSERT_EQ(m.size(), 8u);
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i]["step"], i + 1);
    EXPECT_NEAR(m[i]["lr"].get<double>(), expected_lr(i + 1, 3e-3, 2, 8), 1e-12) << i;
    EXPECT_GT(m[i]["grad_norm"].get<double>(), 0);
    EXPECT_EQ(m[i].contains("val_loss"), i == 3 || i == 7) << i;
  }
  // GPT-2 init gives near-uniform predictions: the first loss is about ln V.
  EXPECT_NEAR(m[0]["loss"].get<double>(), std::log(static_cast<double>(chars.size())), 0.25);
  EXPECT_LT(m[7]["loss"].get<double>(), m[0]["loss"].get<double>());
  EXPECT_EQ(j["train_loss"].get<double>(), m[7]["loss"].get<double>());
  EXPECT_EQ(j["val_loss"].get<double>(), m[7]["val_loss"].get<double>());

  // Progress on stderr (not a terminal: plain lines).
  EXPECT_NE(r.err.find("step 1/8 | loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 8/8 | loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ETA"), std::string::npos);
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  EXPECT_NE(r.err.find("val loss"), std::string::npos);

  // The model folder works with forge generate (no BPE files: ids in, ids out).
  const CliResult g =
      run_forge("generate -m " + out.string() + " --prompt-ids 1,2,3 -n 4 --greedy --json");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(parse_json(g)["ids"].size(), 4u);
}

TEST_F(CliTrain, LossPlotHasBothSeriesTicksAndLegend) {
  const fs::path out = fresh_dir("plot");
  const CliResult r = run_forge(tiny_args(out));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string svg = slurp(out / "loss.svg");
  ASSERT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  auto points_of = [&](const std::string& cls) {
    const std::regex re("<polyline class=\"" + cls + "\"[^>]* points=\"([^\"]*)\"");
    std::smatch mm;
    if (!std::regex_search(svg, mm, re)) return -1;
    const std::string pts = mm[1];
    return static_cast<int>(std::count(pts.begin(), pts.end(), ','));
  };
  EXPECT_EQ(points_of("train"), 8);
  EXPECT_EQ(points_of("val"), 2);
  // x ticks: steps 1..8 get ticks 1, 2, ..., 8 (spacing 1 for about 8 ticks).
  std::vector<std::string> xl;
  const size_t a = svg.find("<g class=\"x-labels\"");
  const size_t b = svg.find("</g>", a);
  const std::string xs = svg.substr(a, b - a);
  const std::regex tre(">([^<]+)</text>");
  for (std::sregex_iterator it(xs.begin(), xs.end(), tre), end; it != end; ++it)
    xl.push_back((*it)[1]);
  EXPECT_EQ(xl, (std::vector<std::string>{"1", "2", "3", "4", "5", "6", "7", "8"}));
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find("loss (nats per token)"), std::string::npos);
  EXPECT_NE(svg.find(">validation</text>"), std::string::npos);
  EXPECT_NE(svg.find(">train</text>"), std::string::npos);
}

/// The points="..." of each polyline of an SVG, in order.
std::vector<std::string> polylines(const std::string& svg) {
  std::vector<std::string> v;
  const std::regex re("<polyline[^>]* points=\"([^\"]*)\"");
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
    v.push_back((*it)[1]);
  return v;
}

TEST_F(CliTrain, PlotRedrawsTheCurveFromMetrics) {
  const fs::path out = fresh_dir("replot");
  ASSERT_EQ(run_forge(tiny_args(out)).code, 0);
  const std::string trained = slurp(out / "loss.svg");
  const CliResult r = run_forge("plot " + out.string() + " -o " + (out / "again.svg").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("8 train and 2 validation points"), std::string::npos) << r.out;
  // Same series as the plot forge train drew (only the title may differ).
  const std::vector<std::string> a = polylines(trained), b = polylines(slurp(out / "again.svg"));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a, b);
  // Default output: DIR/loss.svg, replaced.
  fs::remove(out / "loss.svg");
  ASSERT_EQ(run_forge("plot " + out.string()).code, 0);
  EXPECT_EQ(polylines(slurp(out / "loss.svg")), a);

  // A last line cut short (a run being written) is ignored; garbage elsewhere is an error.
  const std::string metrics = slurp(out / "metrics.jsonl");
  write_bytes(out / "metrics.jsonl", metrics + "{\"step\": 9, \"lo");
  EXPECT_EQ(run_forge("plot " + out.string()).code, 0);
  write_bytes(out / "metrics.jsonl", "not json\n" + metrics);
  CliResult bad = run_forge("plot " + out.string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("error: plot: "), std::string::npos) << bad.err;
  write_bytes(out / "metrics.jsonl", metrics + metrics);  // steps go back to 1
  bad = run_forge("plot " + out.string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("does not follow"), std::string::npos) << bad.err;
  bad = run_forge("plot " + (out / "missing").string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("error: plot: cannot read"), std::string::npos) << bad.err;
}

/// Model bytes and per-step figures (all but the timing fields) of a run's OUT.
TEST_F(CliTrain, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const fs::path full = fresh_dir("full"), split = fresh_dir("split");
  // Dropout on, so that the per-step dropout seeds must resume correctly too.
  const std::string extra = "--dropout 0.1";
  ASSERT_EQ(run_forge(tiny_args(full, extra)).code, 0);
  const CliResult first = run_forge(tiny_args(split, extra + " --stop-after 4"));
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.err.find("stopped at step 4 of 8"), std::string::npos) << first.err;
  EXPECT_EQ(read_metrics(split).size(), 4u);
  // Only --out and --resume: every other setting comes from the checkpoint.
  const CliResult second = run_forge("train --out " + split.string() + " --resume --threads 2");
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.err.find("resuming at step 4 of 8"), std::string::npos) << second.err;
  expect_same_run(result_of(full), result_of(split));
}

TEST_F(CliTrain, MicroBatchesGiveTheFullBatchLosses) {
  const fs::path whole = fresh_dir("whole"), micro = fresh_dir("micro");
  ASSERT_EQ(run_forge(tiny_args(whole, "", 3)).code, 0);
  ASSERT_EQ(run_forge(tiny_args(micro, "--micro-batch 2", 3)).code, 0);
  const auto a = read_metrics(whole), b = read_metrics(micro);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  // The same windows in the same order; only the summation order differs.
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(),
                1e-5 * a[i]["loss"].get<double>())
        << i;
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(),
                1e-4 * a[i]["grad_norm"].get<double>())
        << i;
  }
}

/// "name dtype shape" of every tensor of a safetensors file, in the file's order.
std::vector<std::string> tensor_layout(const fs::path& file) {
  const forge::SafeTensorsFile f = forge::SafeTensorsFile::open(file.string());
  std::vector<std::string> out;
  for (const std::string& n : f.names())
    out.push_back(n + " " + f.info(n).dtype + " " + f.info(n).shape.str());
  return out;
}

std::set<std::string> file_names(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Losses and validation losses of `got` within 1e-4 relative of `want`'s, step by step.
void expect_close_losses(const std::vector<json>& got, const std::vector<json>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = want[i]["loss"].get<double>();
    EXPECT_NEAR(got[i]["loss"].get<double>(), w, 1e-4 * w) << "step " << i + 1;
    if (want[i].contains("val_loss")) {
      const double v = want[i]["val_loss"].get<double>();
      ASSERT_TRUE(got[i].contains("val_loss")) << "step " << i + 1;
      EXPECT_NEAR(got[i]["val_loss"].get<double>(), v, 1e-4 * v) << "step " << i + 1;
    }
  }
}

// `forge train --device D` for every device besides the CPU: 20 steps with dropout give the
// CPU's losses within 1e-4 relative, and the checkpoint has the CPU run's format (files,
// tensor names, dtypes, shapes), so a device run resumes on the CPU and goes on as the
// CPU's own checkpoint does.
TEST_F(CliTrain, OtherDevicesMatchTheCpuAndWriteTheSameCheckpoint) {
  std::vector<std::string> devices;
  for (const forge::DeviceInfo& d : forge::list_devices())
    if (!d.device.is_cpu()) devices.push_back(d.device.str());
  if (devices.empty()) FORGE_SKIP_NO_DEVICE("no device besides the CPU");
  // 20 steps of a 24-step schedule, so that both checkpoints can resume.
  const std::string extra = "--dropout 0.1 --stop-after 20";
  const fs::path cpu = fresh_dir("dev_cpu");
  ASSERT_EQ(run_forge(tiny_args(cpu, extra, 24)).code, 0);
  const std::vector<json> cpu20 = read_metrics(cpu);
  EXPECT_EQ(cpu20.size(), 20u);
  const std::set<std::string> cpu_files = file_names(cpu);
  std::vector<std::vector<std::string>> cpu_layouts;
  for (const char* f : {"model.safetensors", "train_state.safetensors"})
    cpu_layouts.push_back(tensor_layout(cpu / f));
  const std::string resume = " --resume --threads 2";
  ASSERT_EQ(run_forge("train --out " + cpu.string() + resume).code, 0);
  const std::vector<json> cpu24 = read_metrics(cpu);
  EXPECT_EQ(cpu24.size(), 24u);
  for (const std::string& device : devices) {
    SCOPED_TRACE(device);
    const fs::path out = fresh_dir("dev_" + device.substr(0, device.find(':')));
    const CliResult r = run_forge(tiny_args(out, extra + " --device " + device, 24));
    ASSERT_EQ(r.code, 0) << r.err;
    expect_close_losses(read_metrics(out), cpu20);
    EXPECT_EQ(file_names(out), cpu_files);
    EXPECT_EQ(tensor_layout(out / "model.safetensors"), cpu_layouts[0]);
    EXPECT_EQ(tensor_layout(out / "train_state.safetensors"), cpu_layouts[1]);
    // The device's checkpoint goes on to step 24 on the CPU, like the CPU's own.
    const CliResult more = run_forge("train --out " + out.string() + resume);
    ASSERT_EQ(more.code, 0) << more.err;
    expect_close_losses(read_metrics(out), cpu24);
  }
}

TEST_F(CliTrain, NonUtf8TextTrainsWithTheDefaultBpeTokenizer) {
  REQUIRE_GPT2_TOKENIZER();
  const fs::path dir = fresh_dir("bpe");
  std::string bytes;
  for (int i = 0; i < 300; ++i) bytes += "caf\xe9 na\xefve \xff\xfe text \xc3\x28 ok. ";
  write_bytes(dir / "latin1.txt", bytes);
  // The default tokenizer: found relative to the binary (<build>/../data/gpt2-tokenizer).
  const std::string args = "train --data " + (dir / "latin1.txt").string() + " --out " +
                           (dir / "out").string() +
                           " --layers 1 --heads 2 --embd 16 --ctx 16 --batch 2 --seq 8 --steps 2"
                           " --eval-every 0 --sample-every 1 --sample-tokens 4 --threads 2 --json";
  const CliResult r = run_forge(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("--- sample at step 1 ---"), std::string::npos) << r.err;
  const json j = parse_json(r);
  EXPECT_EQ(j["steps"], 2);
  const auto cfg = forge::gpt2::Config::from_json_file((dir / "out" / "config.json").string());
  EXPECT_EQ(cfg.vocab_size, 50257);
  EXPECT_TRUE(fs::exists(dir / "out" / "vocab.json"));
  EXPECT_TRUE(fs::exists(dir / "out" / "merges.txt"));
  // The result is a model folder with its tokenizer: text in, text out.
  const CliResult g =
      run_forge("generate -m " + (dir / "out").string() + " -p 'caf' -n 3 --greedy --json");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(parse_json(g)["ids"].size(), 3u);
  // A preset whose vocab is smaller than the tokenizer's cannot take BPE ids.
  expect_error("train --data " + (dir / "latin1.txt").string() + " --out " +
                   (dir / "out2").string() + " --preset tiny --steps 2",
               "vocabulary");
  // FORGE_TOKENIZER_DIR overrides the search, and a wrong one is named.
  expect_error("train --data " + (dir / "latin1.txt").string() + " --out " +
                   (dir / "out3").string() + " --steps 2",
               "FORGE_TOKENIZER_DIR", "FORGE_TOKENIZER_DIR=" + (dir / "nothing").string());
}

TEST_F(CliTrain, FineTunesFromAModelFolder) {
  const fs::path base = fresh_dir("ft_base"), tuned = fresh_dir("ft_out");
  ASSERT_EQ(run_forge(tiny_args(base, "", 2)).code, 0);
  // The base folder's tokenizer (tokenizer_char.json) is the default.
  const CliResult r = run_forge("train --data " + g_text.string() + " --out " + tuned.string() +
                                " --init-from " + base.string() +
                                " --batch 4 --seq 16 --steps 2 --eval-every 0 --sample-every 0 "
                                "--threads 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(forge::gpt2::Config::from_json_file((tuned / "config.json").string()),
            forge::gpt2::Config::from_json_file((base / "config.json").string()));
  // Its first loss is the base model's loss on the same batch: lower than a fresh init's.
  const auto fresh = read_metrics(base), ft = read_metrics(tuned);
  ASSERT_EQ(ft.size(), 2u);
  EXPECT_LT(ft[0]["loss"].get<double>(), fresh[0]["loss"].get<double>());
  expect_error("train --data " + g_text.string() + " --out " + (g_root / "ft_bad").string() +
                   " --init-from " + base.string() + " --layers 3",
               "--init-from");
}

TEST_F(CliTrain, NonFiniteStepsAreSkippedWithAWarning) {
  const fs::path out = fresh_dir("skipped");
  // A learning rate of 1e30 (no clipping) makes the weights overflow in step 1's update, so
  // every later loss is NaN and those steps must be skipped, not applied.
  std::string args = tiny_args(out, "--clip 0 --json", 3);
  args.replace(args.find("--lr 3e-3"), 9, "--lr 1e30");
  const CliResult r = run_forge(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: step 2 skipped: loss nan"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("warning: step 3 skipped: loss nan"), std::string::npos) << r.err;
  const std::vector<json> m = read_metrics(out);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(m[0]["loss"].is_number());
  EXPECT_FALSE(m[0].contains("skipped"));
  for (size_t i : {1u, 2u}) {
    EXPECT_TRUE(m[i]["loss"].is_null()) << i;  // NaN is written as null
    EXPECT_EQ(m[i]["skipped"], true) << i;
  }
  EXPECT_TRUE(parse_json(r)["train_loss"].is_null());
  // The plot leaves the non-finite points out.
  const std::string svg = slurp(out / "loss.svg");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST_F(CliTrain, BenchReportsTrainingThroughput) {
  const CliResult r = run_forge("bench --preset tiny --prompt-tokens 8 --decode-tokens 4 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  EXPECT_EQ(j["train_batch"], 4);
  EXPECT_EQ(j["train_seq"], 64);  // tiny's context
  const double tok_s = j["train_tok_s"].get<double>(), ms = j["train_step_ms"].get<double>();
  EXPECT_GT(tok_s, 0);
  // Both figures come from the same median step: B T / (ms / 1000).
  EXPECT_NEAR(tok_s * ms / 1000.0, 4.0 * 64.0, 1e-6 * 256.0);
}

}  // namespace
