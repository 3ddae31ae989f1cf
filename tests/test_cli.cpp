// End-to-end tests of the forge binary (FORGE_BINARY): exit codes, stdout/stderr, JSON
// shapes. No timing assertions: only that figures are positive and self-consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ci.h"
#include "cli_runner.h"
#include "forge/devices.h"
#include "forge/op_table.h"
#include "forge/version.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using forge::test::CliResult;
using forge::test::parse_json;
using forge::test::run_forge;

TEST(Cli, VersionPrintsTheVersion) {
  const CliResult r = run_forge("--version");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("forge ") + forge::kVersion + "\n");
  EXPECT_EQ(r.err, "");
}

TEST(Cli, HelpExitsZeroAndListsSubcommands) {
  const CliResult r = run_forge("--help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* sub : {"devices", "bench", "generate", "tokenize", "eval", "--threads"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub << " missing from:\n" << r.out;
  const CliResult b = run_forge("bench --help");
  EXPECT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.out.find("--trans-b"), std::string::npos) << b.out;
}

TEST(Cli, DevicesJsonHasTheCpu) {
  const CliResult r = run_forge("devices --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  ASSERT_TRUE(j.contains("devices") && j["devices"].is_array() && !j["devices"].empty()) << r.out;
  const json& cpu = j["devices"][0];
  EXPECT_EQ(cpu.at("device"), "cpu");
  EXPECT_EQ(cpu.at("kind"), "cpu");
  EXPECT_GE(cpu.at("threads").get<int>(), 1);
  EXPECT_GT(cpu.at("memory_bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(cpu.at("max_binding_bytes").get<uint64_t>(), 0u);  // the CPU has no binding limit
  const std::string simd = cpu.at("simd");
  EXPECT_TRUE(simd == "portable" || simd == "avx2" || simd == "avx512") << simd;
  EXPECT_FALSE(cpu.at("name").get<std::string>().empty());
}

TEST(Cli, DevicesTextNamesTheCpu) {
  const CliResult r = run_forge("devices");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("cpu: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("simd"), std::string::npos) << r.out;
}

int cpu_threads(const CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  if (r.code != 0) return -1;
  return parse_json(r)["devices"][0].value("threads", -1);
}

TEST(Cli, ThreadsBeforeOrAfterTheSubcommandOrFromTheEnvironment) {
  EXPECT_EQ(cpu_threads(run_forge("--threads 1 devices --json")), 1);
  EXPECT_EQ(cpu_threads(run_forge("devices --json --threads 3")), 3);
  EXPECT_EQ(cpu_threads(run_forge("devices --json", "FORGE_NUM_THREADS=2")), 2);
  // The flag wins over the environment.
  EXPECT_EQ(cpu_threads(run_forge("devices --json --threads 1", "FORGE_NUM_THREADS=2")), 1);
}

/// Checks the fields every matmul bench report has, and their consistency.
void check_matmul_report(const json& j, int64_t m, int64_t n, int64_t k, int64_t batch) {
  EXPECT_EQ(j.at("op"), "matmul");
  EXPECT_EQ(j.at("m"), m);
  EXPECT_EQ(j.at("n"), n);
  EXPECT_EQ(j.at("k"), k);
  EXPECT_EQ(j.at("batch"), batch);
  EXPECT_GE(j.at("threads").get<int>(), 1);
  const double ms = j.at("ms"), gflops = j.at("gflops");
  EXPECT_GT(ms, 0.0);
  EXPECT_GT(gflops, 0.0);
  // gflops is 2*B*M*N*K / time, stated independently of the binary.
  const double flops = 2.0 * batch * m * n * k;
  EXPECT_NEAR(gflops, flops / (ms * 1e-3) * 1e-9, 1e-6 * gflops);
  if (!j.at("openblas_gflops").is_null()) {
    const double blas = j.at("openblas_gflops");
    EXPECT_GT(blas, 0.0);
    EXPECT_NEAR(j.at("ratio_vs_openblas").get<double>(), gflops / blas, 1e-6 * gflops / blas);
    // forge and OpenBLAS computed the same product (inputs in [-1, 1), so entries are
    // O(sqrt(k)) and float32 rounding stays far below this bound).
    EXPECT_LT(j.at("max_abs_diff_vs_openblas").get<double>(), 1e-3);
  } else {
    EXPECT_TRUE(j.at("ratio_vs_openblas").is_null());
  }
}

TEST(Cli, BenchMatmulJson) {
  const CliResult r = run_forge("bench --op matmul --m 33 --n 17 --k 65 --repeat 3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  check_matmul_report(j, 33, 17, 65, 1);
  EXPECT_TRUE(j.at("gbps").is_null()) << "bandwidth is reported for m = 1 only";
}

// forge bench --op takes every op of the op table; each one but matmul (above) runs at GPT-2's
// shapes over --rows tokens, on every device, and reports its time and bytes per second
// (and GFLOP/s for the ops that compute more than they move).
TEST(Cli, BenchOpTimesEveryOpOfTheTableOnEveryDevice) {
  for (const forge::DeviceInfo& info : forge::list_devices()) {
    const std::string dev = info.device.str();
    for (const forge::OpInfo& op : forge::op_table()) {
      if (op.name == "matmul") continue;
      SCOPED_TRACE(op.name + " on " + dev);
      const CliResult r =
          run_forge("bench --op " + op.name + " --rows 16 --repeat 1 --json --device " + dev);
      ASSERT_EQ(r.code, 0) << r.err;
      const json j = parse_json(r);
      EXPECT_EQ(j.at("op"), op.name);
      EXPECT_EQ(j.at("device"), dev);
      EXPECT_EQ(j.at("rows"), 16);
      EXPECT_GT(j.at("ms").get<double>(), 0.0);
      EXPECT_GT(j.at("gbps").get<double>(), 0.0);
      const bool computes = op.name == "attention" || op.name == "attention_at" ||
                            op.name == "attention_bwd" || op.name == "layernorm_matmul" ||
                            op.name == "matmul_add_layernorm_matmul";
      EXPECT_EQ(j.at("gflops").is_null(), !computes);
    }
  }
}

TEST(Cli, BenchOpRefusesWhatItCannotRun) {
  struct Bad {
    const char* args;
    const char* says;
  };
  for (const Bad& b :
       {Bad{"bench --op nosuch", "--op"},
        Bad{"bench --op add --m 3", "--m is for --op matmul, not --op add"},
        Bad{"bench --op layernorm --trans-b", "--trans-b is for --op matmul"},
        Bad{"bench --op matmul --m 2 --n 2 --k 2 --rows 5", "--rows is for the ops"},
        Bad{"bench --op add --rows 0", "--rows"}, Bad{"bench --op add --rows 70000", "--rows"}}) {
    const CliResult r = run_forge(b.args);
    EXPECT_EQ(r.code, 1) << b.args;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << b.args << ": " << r.err;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << b.args << ": " << r.err;
  }
}

TEST(Cli, BenchGemvReportsBandwidthOfB) {
  const CliResult r =
      run_forge("bench --op matmul --m 1 --n 300 --k 70 --trans-b --repeat 3 --json --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  check_matmul_report(j, 1, 300, 70, 1);
  EXPECT_EQ(j.at("threads"), 1);
  EXPECT_EQ(j.at("trans_b"), true);
  // gbps * seconds = the bytes of b: 300 * 70 floats.
  const double bytes = j.at("gbps").get<double>() * 1e9 * j.at("ms").get<double>() * 1e-3;
  EXPECT_NEAR(bytes, 300.0 * 70 * 4, 1e-3 * 300 * 70 * 4);
}

TEST(Cli, BenchGemvOfQuantizedWeightsReadsTheirBytes) {
  // b in q4_0: 18 bytes per 32 weights; --dtype needs b stored [N, K].
  const CliResult r =
      run_forge("bench --op matmul --m 1 --n 300 --k 64 --trans-b --dtype q4_0 --repeat 3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  EXPECT_EQ(j.at("dtype"), "q4_0");
  EXPECT_TRUE(j.at("openblas_gflops").is_null());  // OpenBLAS has no q4_0 product
  const double bytes = j.at("gbps").get<double>() * 1e9 * j.at("ms").get<double>() * 1e-3;
  EXPECT_NEAR(bytes, 300.0 * 2 * 18, 1e-3 * 300 * 2 * 18);
  for (const char* bad : {"bench --op matmul --m 1 --n 8 --k 64 --dtype f16",
                          "bench --op matmul --m 1 --n 8 --k 64 --trans-b --dtype q9",
                          "bench --op matmul --m 1 --n 8 --k 48 --trans-b --dtype q8_0"}) {
    const CliResult e = run_forge(bad);
    EXPECT_EQ(e.code, 1) << bad;
    EXPECT_EQ(e.err.rfind("error: ", 0), 0u) << bad << ": " << e.err;
  }
}

TEST(Cli, BenchBatchedTransposedA) {
  const CliResult r =
      run_forge("bench --op matmul --m 5 --n 9 --k 7 --batch 3 --trans-a --repeat 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  check_matmul_report(parse_json(r), 5, 9, 7, 3);
}

/// The first device besides the CPU that `forge devices --json` lists ("" when none).
std::string first_other_device() {
  const CliResult r = run_forge("devices --json");
  if (r.code != 0) return "";
  const json j = parse_json(r);  // named: a range-for over a temporary's member dangles
  for (const json& d : j.at("devices")) {
    const std::string name = d.at("device");
    if (name != "cpu") return name;
  }
  return "";
}

TEST(Cli, BenchMatmulOnAnotherDevice) {
  const std::string dev = first_other_device();
  if (dev.empty()) FORGE_SKIP_NO_DEVICE("no device besides the CPU");
  const CliResult r =
      run_forge("bench --op matmul --device " + dev + " --m 70 --n 90 --k 33 --repeat 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  check_matmul_report(j, 70, 90, 33, 1);
  EXPECT_EQ(j.at("device").get<std::string>(), dev);
  EXPECT_TRUE(std::isfinite(j.at("gflops").get<double>()));
  // No OpenBLAS off the CPU; instead the device's result against forge's CPU one.
  EXPECT_TRUE(j.at("openblas_gflops").is_null());
  EXPECT_TRUE(j.at("max_abs_diff_vs_openblas").is_null());
  EXPECT_LT(j.at("max_abs_diff_vs_cpu").get<double>(), 1e-3);
}

TEST(Cli, BenchMatmulOnAnotherDeviceText) {
  const std::string dev = first_other_device();
  if (dev.empty()) FORGE_SKIP_NO_DEVICE("no device besides the CPU");
  const CliResult r = run_forge("bench --op matmul --device " + dev +
                                " --m 130 --n 129 --k 64 --trans-b --repeat 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("on " + dev), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("from forge on the CPU"), std::string::npos) << r.out;
}

// An index past a registered backend's devices: one error line naming the backend.
TEST(Cli, AnAbsentDeviceIndexIsRefused) {
  const std::string dev = first_other_device();
  if (dev.empty()) FORGE_SKIP_NO_DEVICE("no device besides the CPU");
  const std::string backend = dev.substr(0, dev.find(':'));
  const CliResult r = run_forge("bench --op matmul --m 4 --n 4 --k 4 --device " + backend + ":99");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(backend), std::string::npos) << r.err;
}

TEST(Cli, BenchMatmulOnTheCpuNamesIt) {
  const CliResult r = run_forge("bench --op matmul --device cpu --m 4 --n 4 --k 4 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = parse_json(r);
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_TRUE(j.at("max_abs_diff_vs_cpu").is_null());
}

TEST(Cli, BenchTextReport) {
  const CliResult r = run_forge("bench --op matmul --m 8 --n 8 --k 8 --repeat 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("GFLOP/s"), std::string::npos) << r.out;
}

// ---- bad input: exit 1, nothing on stdout, stderr starts with "error:" ---------------------

struct BadCase {
  const char* name;
  const char* args;
  const char* env = "";
  const char* stderr_mentions = "";  // a word the message must contain
};

class CliRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliRejects, ExitsOneWithAnErrorLine) {
  const BadCase& c = GetParam();
  const CliResult r = run_forge(c.args, c.env);
  EXPECT_EQ(r.code, 1) << "forge " << c.args << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(c.stderr_mentions), std::string::npos) << r.err;
}

const char* const kMatmul = "bench --op matmul --m 4 --n 4 --k 4";

INSTANTIATE_TEST_SUITE_P(
    Cli, CliRejects,
    ::testing::Values(
        BadCase{"NoSubcommand", ""},
        BadCase{"UnknownSubcommand", "frobnicate", "", "unknown subcommand 'frobnicate'"},
        BadCase{"UnknownGlobalOption", "--frobnicate", "", "--frobnicate"},
        BadCase{"UnknownBenchOption", "bench --op matmul --m 4 --n 4 --k 4 --bogus", "", "--bogus"},
        BadCase{"NegativeSize", "bench --op matmul --m -1 --n 4 --k 4", "", "--m"},
        BadCase{"NonNumericSize", "bench --op matmul --m abc --n 4 --k 4", "", "not an integer"},
        BadCase{"TrailingGarbage", "bench --op matmul --m 4x --n 4 --k 4", "", "not an integer"},
        BadCase{"ZeroSize", "bench --op matmul --m 0 --n 4 --k 4", "", "--m"},
        BadCase{"SizeBeyondInt32", "bench --op matmul --m 4294967296 --n 4 --k 4", "", "--m"},
        BadCase{"SizeOverflowingInt64", "bench --op matmul --m 99999999999999999999 --n 4 --k 4",
                "", "--m"},
        BadCase{"TooLargeForMemory", "bench --op matmul --m 1000000 --n 1000000 --k 1000000", "",
                "memory"},
        BadCase{"TooLargeBatchForMemory",
                "bench --op matmul --m 4096 --n 4096 --k 4096 --batch 100000", "", "memory"},
        BadCase{"MissingValue", "bench --op matmul --m", "", "--m"},
        BadCase{"MissingK", "bench --op matmul --m 4 --n 4", "", "--k"},
        BadCase{"ThreadsZero", "--threads 0 devices", "", "--threads"},
        BadCase{"ThreadsZeroAfterSubcommand", "devices --threads 0", "", "--threads"},
        BadCase{"ThreadsTooMany", "--threads 1025 devices", "", "--threads"},
        BadCase{"ThreadsEnvInvalid", "devices", "FORGE_NUM_THREADS=zero", "FORGE_NUM_THREADS"},
        BadCase{"ThreadsEnvOutOfRange", "devices", "FORGE_NUM_THREADS=5000", "FORGE_NUM_THREADS"},
        BadCase{"RepeatZero", "bench --op matmul --m 4 --n 4 --k 4 --repeat 0", "", "--repeat"},
        BadCase{"NeitherOpNorPreset", "bench", "", "exactly one"},
        BadCase{"BothOpAndPreset", "bench --op matmul --preset gpt2 --m 4 --n 4 --k 4", "",
                "excludes"},
        BadCase{"PresetWithMatmulSize", "bench --preset gpt2 --m 4", "", "excludes"},
        BadCase{"UnknownOp", "bench --op conv --m 4 --n 4 --k 4", "", "conv"},
        BadCase{"UnparsableDevice", "bench --op matmul --m 4 --n 4 --k 4 --device gpu", "", "gpu"},
        BadCase{"CudaDevice", "bench --op matmul --m 4 --n 4 --k 4 --device cuda", "", "cuda"},
        BadCase{"DevicesExtraArgument", "devices extra"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

// The matmul case above must itself be accepted, or the rejections prove nothing.
TEST(Cli, BaselineOfTheRejectionsIsAccepted) {
  const CliResult r = run_forge(std::string(kMatmul) + " --repeat 1 --json");
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
