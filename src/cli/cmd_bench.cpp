// forge bench: times matmul (--op matmul) on random inputs on any device (on the CPU side by
// side with OpenBLAS when the build has it; elsewhere checked against forge's CPU result),
// any other op of the table (--op NAME: bench_op.cpp), or a whole random-init model
// (--preset, see cmd_bench_model.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/ops.h"
#include "forge/quantize.h"
#include "forge/tensor.h"
#include "forge/threads.h"

#ifdef FORGE_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace forge::cli {
namespace {

struct MatmulBenchOptions {
  std::string op;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  // The epilogues as decode runs them: + bias [N], gelu, and accumulate (matmul_add_ onto an
  // output-shaped tensor, the residual stream).
  bool bias = false, gelu = false, accumulate = false;
  int64_t batch = 1;
  int repeat = 10;
  bool json = false;
  std::string device = "cpu";
  std::string dtype = "f32";  // b's: f16, bf16, q8_0, q4_0 are stored [N, K] (trans_b)
};

struct BenchArgs {
  MatmulBenchOptions matmul;
  ModelBenchOptions model;
  std::string preset;
  int64_t rows = 1024;  // --op other than matmul
};

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "bench: " + what);
}

std::string shape_text(int64_t batch, int64_t rows, int64_t cols) {
  std::string s = "[";
  if (batch > 1) s += std::to_string(batch) + ", ";
  return s + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

/// Refuses shapes whose buffers would not fit comfortably in the memory of `device` (the host
/// holds the same buffers either way), before allocating.
void check_fits_in_memory(const MatmulBenchOptions& o, Device device) {
  // long double: m*k*batch can exceed int64 for absurd inputs; this is an estimate only.
  const long double b = static_cast<long double>(o.batch);
  const long double m = static_cast<long double>(o.m);
  const long double n = static_cast<long double>(o.n);
  const long double k = static_cast<long double>(o.k);
  // a, b, and up to three outputs alive at once: forge's previous and current result (the
  // loop reassigns) and the OpenBLAS (or CPU reference) one.
  const long double bytes = 4.0L * b * (m * k + k * n + 3.0L * m * n);
  for (Device d : {Device::cpu(), device}) {
    const uint64_t memory = device_info(d).memory_bytes;
    const long double limit =
        memory ? static_cast<long double>(memory) / 2.0L : 4.0L * (1ULL << 30);
    if (bytes > limit) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "matmul m=%lld n=%lld k=%lld batch=%lld needs %.1Lf GiB of buffers, more "
                    "than half of the %.1f GiB of memory of %s",
                    static_cast<long long>(o.m), static_cast<long long>(o.n),
                    static_cast<long long>(o.k), static_cast<long long>(o.batch),
                    bytes / (1ULL << 30), static_cast<double>(memory) / (1ULL << 30),
                    d.str().c_str());
      fail(ErrorKind::Range, buf);
    }
  }
}

// Off the CPU, the result is compared with forge's CPU matmul up to this many multiply-adds
// (1024^3: a fraction of a second on a few cores); beyond, the check is skipped (JSON null).
constexpr double kMaxCheckedMacs = static_cast<double>(int64_t{1} << 30);

int run_matmul_bench(const MatmulBenchOptions& o) {
  if (o.m <= 0 || o.n <= 0 || o.k <= 0)
    fail(ErrorKind::Format, "--op matmul needs --m, --n and --k (each >= 1)");
  const Device device = parse_device(o.device);
  const bool on_cpu = device == Device::cpu();
  check_fits_in_memory(o, device);

  // a: [B, M, K] (trans_a: [B, K, M]); b: [B, K, N] (trans_b: [B, N, K]); no batch dim when
  // B = 1. Both operands batched is the attention pattern; a shared b is just a larger M.
  auto dims = [&](int64_t rows, int64_t cols) {
    return o.batch > 1 ? Shape{o.batch, rows, cols} : Shape{rows, cols};
  };
  const DType b_dtype = weight_dtype_named(o.dtype);
  if (b_dtype != DType::F32 && (!o.trans_b || o.batch > 1))
    fail(ErrorKind::Format, "--dtype " + o.dtype + " weights are one [N, K] matrix: pass --trans-b "
                            "and no --batch");
  Tensor a = Tensor::empty(o.trans_a ? dims(o.k, o.m) : dims(o.m, o.k), DType::F32);
  Tensor b = Tensor::empty(o.trans_b ? dims(o.n, o.k) : dims(o.k, o.n), DType::F32);
  fill_random(a, 1);
  fill_random(b, 2);
  if (b_dtype != DType::F32) b = convert_weights(b, b_dtype);
  MatmulSpec spec;
  spec.trans_a = o.trans_a;
  spec.trans_b = o.trans_b;
  spec.gelu = o.gelu;
  Tensor bias, acc;
  if (o.bias) {
    bias = Tensor::empty({o.n}, DType::F32);
    fill_random(bias, 3);
  }
  if (o.accumulate) {
    acc = Tensor::empty(o.batch > 1 ? Shape{o.batch, o.m, o.n} : Shape{o.m, o.n}, DType::F32);
    fill_random(acc, 4);
  }

  const int threads = num_threads();
  // Inputs go to the device once; off the CPU each sample waits for the device at its end.
  const Tensor da = on_cpu ? a : a.to(device), db = on_cpu ? b : b.to(device);
  const Tensor dbias = on_cpu || !o.bias ? bias : bias.to(device);
  // The accumulator the timed calls add into (its values grow; only time is measured on it).
  Tensor dacc = o.accumulate ? acc.to(device) : Tensor();
  // One product as the timed loop runs it; `into` is the accumulator with --accumulate.
  auto product = [&](const Tensor& x, const Tensor& w, const Tensor& bi, Tensor& into) {
    if (!o.accumulate) return matmul(x, w, spec, bi);
    matmul_add_(into, x, w, spec, bi);
    return into;
  };
  std::function<void()> sync;
  if (!on_cpu) sync = [device] { synchronize(device); };
  Tensor out;
  const double sec = median_seconds([&] { out = product(da, db, dbias, dacc); }, o.repeat, sync);
  const double flops = 2.0 * static_cast<double>(o.batch) * static_cast<double>(o.m) *
                       static_cast<double>(o.n) * static_cast<double>(o.k);
  const double gflops = flops / sec * 1e-9;
  // For m = 1 the op is a GEMV bound by reading b once: bandwidth is the figure that counts.
  std::optional<double> gbps;
  if (o.m == 1) gbps = static_cast<double>(b.nbytes()) / sec * 1e-9;

  // Largest |difference| from OpenBLAS (on the CPU) or from forge's CPU result (elsewhere).
  std::optional<double> blas_sec, blas_gflops, max_diff;
  const double macs = flops / 2.0;
  // OpenBLAS computes the plain product only: no side-by-side figure with an epilogue.
  [[maybe_unused]] const bool plain =
      !o.bias && !o.gelu && !o.accumulate && b_dtype == DType::F32;
  if (!on_cpu && macs <= kMaxCheckedMacs) {
    // Once more from the same accumulator on both devices (the timed one has drifted).
    Tensor acc_dev = o.accumulate ? acc.to(device) : Tensor();
    Tensor acc_cpu = o.accumulate ? acc.clone() : Tensor();
    const std::vector<float> got = product(da, db, dbias, acc_dev).to_vector<float>();
    const std::vector<float> want = product(a, b, bias, acc_cpu).to_vector<float>();
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    max_diff = diff;
  }
#ifdef FORGE_HAVE_OPENBLAS
  if (on_cpu && plain) {
    openblas_set_num_threads(threads);
    std::vector<float> c(static_cast<size_t>(out.numel()));
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    const int M = static_cast<int>(o.m), N = static_cast<int>(o.n), K = static_cast<int>(o.k);
    const int64_t a_stride = o.m * o.k, b_stride = o.k * o.n, c_stride = o.m * o.n;
    blas_sec = median_seconds(
        [&] {
          for (int64_t i = 0; i < o.batch; ++i)
            cblas_sgemm(CblasRowMajor, o.trans_a ? CblasTrans : CblasNoTrans,
                        o.trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, pa + i * a_stride,
                        o.trans_a ? M : K, pb + i * b_stride, o.trans_b ? K : N, 0.0f,
                        c.data() + i * c_stride, N);
        },
        o.repeat);
    blas_gflops = flops / *blas_sec * 1e-9;
    // A cheap sanity check that both computed the same product.
    const float* po = out.data<float>();
    double diff = 0;
    for (size_t i = 0; i < c.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(po[i] - c[i])));
    max_diff = diff;
  }
#endif

  if (o.json) {
    auto opt = [](const std::optional<double>& v) {
      return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
    };
    nlohmann::ordered_json j = {
        {"op", "matmul"},
        {"device", device.str()},
        {"precision", device_precision(device)},
        {"m", o.m},
        {"n", o.n},
        {"k", o.k},
        {"batch", o.batch},
        {"dtype", dtype_name(b_dtype)},
        {"trans_a", o.trans_a},
        {"trans_b", o.trans_b},
        {"bias", o.bias},
        {"gelu", o.gelu},
        {"accumulate", o.accumulate},
        {"threads", threads},
        {"repeat", o.repeat},
        {"ms", sec * 1e3},
        {"gflops", gflops},
        {"gbps", opt(gbps)},
        {"openblas_ms",
         blas_sec ? nlohmann::ordered_json(*blas_sec * 1e3) : nlohmann::ordered_json(nullptr)},
        {"openblas_gflops", opt(blas_gflops)},
        {"ratio_vs_openblas", blas_gflops ? nlohmann::ordered_json(gflops / *blas_gflops)
                                          : nlohmann::ordered_json(nullptr)},
        {"max_abs_diff_vs_openblas", on_cpu ? opt(max_diff) : nlohmann::ordered_json(nullptr)},
        {"max_abs_diff_vs_cpu", on_cpu ? nlohmann::ordered_json(nullptr) : opt(max_diff)}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s a %s%s @ b %s %s%s%s%s on %s, %d thread%s, median of %d\n",
              o.accumulate ? "matmul_add_" : "matmul",
              shape_text(o.batch, o.trans_a ? o.k : o.m, o.trans_a ? o.m : o.k).c_str(),
              o.trans_a ? "^T" : "",
              dtype_name(b_dtype), shape_text(o.batch, o.trans_b ? o.n : o.k, o.trans_b ? o.k : o.n).c_str(),
              o.trans_b ? "^T" : "", o.bias ? " + bias" : "", o.gelu ? ", gelu" : "",
              device.str().c_str(), threads, threads == 1 ? "" : "s", o.repeat);
  std::printf("  forge     %10.4f ms  %8.1f GFLOP/s", sec * 1e3, gflops);
  if (gbps) std::printf("  %6.1f GB/s of b", *gbps);
  std::printf("\n");
  if (blas_sec) {
    std::printf("  openblas  %10.4f ms  %8.1f GFLOP/s", *blas_sec * 1e3, *blas_gflops);
    if (o.m == 1)
      std::printf("  %6.1f GB/s of b", static_cast<double>(b.nbytes()) / *blas_sec * 1e-9);
    std::printf("\n  forge / openblas = %.2fx   (max |difference| %.3g)\n", gflops / *blas_gflops,
                *max_diff);
  } else if (!on_cpu) {
    if (max_diff)
      std::printf("  max |difference| from forge on the CPU: %.3g\n", *max_diff);
    else
      std::printf("  (over 2^30 multiply-adds: not checked against the CPU)\n");
  } else {
    std::printf("  (no OpenBLAS side-by-side: not built with it, or an epilogue was given)\n");
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Benchmark one op (--op NAME) or a random-init model (--preset NAME); the global "
      "--threads T may follow the subcommand");
  // Parsed values must outlive register_bench: the action runs after parsing.
  auto args = std::make_shared<BenchArgs>();
  MatmulBenchOptions& mo = args->matmul;
  ModelBenchOptions& po = args->model;
  const int64_t max_dim = (int64_t{1} << 31) - 1;

  CLI::Option* op =
      cmd->add_option("--op", mo.op,
                      "The op to time: any op of the op table (matmul takes --m, --n, --k and "
                      "its flags; the others run at GPT-2 124M's shapes over --rows tokens)")
          ->check(CLI::IsMember(bench_op_names()));
  CLI::Option* preset =
      cmd->add_option("--preset", args->preset, "A model preset, e.g. gpt2 (124M shapes)");
  op->excludes(preset);
  CLI::Option* model =
      cmd->add_option("--model", args->model.model,
                      "A model folder or .gguf file to time (like --preset, with its weights)");
  model->excludes(op);
  model->excludes(preset);

  // --op matmul
  std::vector<CLI::Option*> op_only = {
      cmd->add_option("--m", mo.m, "matmul: rows of op(a) and of the output")
          ->check(int_in_range(1, max_dim)),
      cmd->add_option("--n", mo.n, "matmul: columns of op(b) and of the output")
          ->check(int_in_range(1, max_dim)),
      cmd->add_option("--k", mo.k, "matmul: the inner dimension")->check(int_in_range(1, max_dim)),
      cmd->add_flag("--trans-a", mo.trans_a, "matmul: a is stored [K, M] and used transposed"),
      cmd->add_flag("--trans-b", mo.trans_b,
                    "matmul: b is stored [N, K] and used transposed (the tied LM head)"),
      cmd->add_flag("--bias", mo.bias, "matmul: add a bias [N]"),
      cmd->add_flag("--gelu", mo.gelu, "matmul: the gelu epilogue (MatmulSpec::gelu)"),
      cmd->add_flag("--accumulate", mo.accumulate,
                    "matmul: time matmul_add_ (add the product to an [M, N] accumulator)"),
  };
  CLI::Option* rows_opt =
      cmd->add_option("--rows", args->rows, "--op other than matmul: tokens (rows) of its operands")
          ->check(int_in_range(1, 65536))
          ->capture_default_str();
  CLI::Option* repeat =
      cmd->add_option("--repeat", mo.repeat, "--op: timed samples; the median is reported")
          ->check(int_in_range(1, 10000))
          ->capture_default_str();
  op_only.push_back(rows_opt);
  op_only.push_back(repeat);
  // --preset NAME
  std::vector<CLI::Option*> preset_only = {
      cmd->add_option("--prompt-tokens", po.prompt_tokens, "preset: prompt length (prefill)")
          ->check(int_in_range(1, 1 << 20))
          ->capture_default_str(),
      cmd->add_option("--decode-tokens", po.decode_tokens, "preset: tokens to decode")
          ->check(int_in_range(0, 1 << 20))
          ->capture_default_str(),
      cmd->add_flag(
          "--profile", po.profile,
          "preset: also time each kernel of a prefill, a decode step and a training step"),
      cmd->add_option("--train-batch", po.train_batch, "preset: sequences per training step")
          ->check(int_in_range(1, 1 << 16))
          ->capture_default_str(),
      cmd->add_option("--train-seq", po.train_seq,
                      "preset: tokens per training sequence (capped at the context)")
          ->check(int_in_range(1, 1 << 20))
          ->capture_default_str(),
      cmd->add_option("--train-steps", po.train_steps,
                      "preset: timed training steps after a warm-up one (0: no training)")
          ->check(int_in_range(0, 10000))
          ->capture_default_str(),
  };
  for (CLI::Option* o : op_only) o->excludes(preset);
  for (CLI::Option* o : preset_only) o->excludes(op);
  // Shared: both operands of a matmul, or sequences of a model.
  cmd->add_option("--batch", mo.batch, "Batch size (matmul: both operands get a batch dim)")
      ->check(int_in_range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--json", mo.json, "Print one JSON object instead of text");
  cmd->add_option("--dtype", mo.dtype,
                  "Weight dtype, f32 (default), f16, bf16, q8_0 or q4_0: matmul's b (stored [N, "
                  "K]: with --trans-b), or the preset's weights");
  cmd->add_option("--device", po.device, "Device to run on (" + device_choices() + ")")
      ->capture_default_str();
  cmd->add_option("--precision", po.precision,
                  "The device's matrix products: fp32, tf32 or bf16 (as forge train's)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}))
      ->capture_default_str();

  const std::vector<CLI::Option*> matmul_only(op_only.begin(), op_only.begin() + 8);
  cmd->callback([&action, args, rows_opt, matmul_only] {
    action = [args, rows_opt, matmul_only]() -> int {
      if (args->matmul.op.empty() && args->preset.empty() && args->model.model.empty())
        fail(ErrorKind::Format, "give exactly one of --op NAME, --preset NAME or --model PATH");
      set_device_precision(parse_device(args->model.device), args->model.precision);
      if (!args->matmul.op.empty() && args->matmul.op != "matmul") {
        for (const CLI::Option* o : matmul_only)
          if (o->count() > 0)
            fail(ErrorKind::Format,
                 o->get_name() + " is for --op matmul, not --op " + args->matmul.op);
        OpBenchOptions options;
        options.op = args->matmul.op;
        options.rows = args->rows;
        options.repeat = args->matmul.repeat;
        options.device = args->model.device;
        options.json = args->matmul.json;
        return bench_op(options);
      }
      if (rows_opt->count() > 0) fail(ErrorKind::Format, "--rows is for the ops other than matmul");
      if (!args->preset.empty() || !args->model.model.empty()) {
        ModelBenchOptions options = args->model;
        if (!args->preset.empty()) options.preset = args->preset;
        options.dtype = args->matmul.dtype;
        if (!options.model.empty() && options.dtype != "f32")
          fail(ErrorKind::Format, "--dtype is for --preset and --op matmul: a --model keeps its own");
        options.batch = static_cast<int>(args->matmul.batch);
        options.json = args->matmul.json;
        return bench_model(options);
      }
      MatmulBenchOptions options = args->matmul;
      options.device = args->model.device;
      return run_matmul_bench(options);
    };
  });
}

}  // namespace forge::cli
