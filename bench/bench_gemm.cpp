// forge_bench_gemm: the CPU GEMM engine vs OpenBLAS cblas_sgemm, side by side, on GPT-2 124M
// shapes. Prints GFLOP/s (median and best of several runs), the ratio to OpenBLAS, the
// fraction of a given FMA peak, and for m = 1 the GB/s of b streamed.
//
//   FORGE_NUM_THREADS=2 build-x/forge_bench_gemm [--peak GFLOPS] [--time SECONDS] [--filter S]
//                                   [--cpu-time]
//
// Both libraries get the same thread count (FORGE_NUM_THREADS, else all cores) and write into
// preallocated outputs; forge's time is gemm::run itself (the kernel forge::matmul calls).
// --cpu-time divides the process CPU time by the thread count instead of reading the wall
// clock: on a machine shared with other work it shows what the kernels do while they run
// (with one thread it is exact; with more it also counts the pool's spin-waits).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"
#include "forge/threads.h"

#ifdef FORGE_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

namespace gemm = forge::cpu::gemm;

struct Shape {
  const char* name;
  int64_t batch, m, k, n;
  bool ta, tb;
  int64_t b_stored = 0;  // stored rows of b when b_rows cuts it (KV cache capacity), else 0
};

// GPT-2 124M: C = 768, 4C = 3072, 3C = 2304, V = 50257, head dim 64, 12 heads.
const Shape kShapes[] = {
    {"square 1024", 1, 1024, 1024, 1024, false, false},
    {"qkv T=64", 1, 64, 768, 2304, false, false},
    {"fc B*T=1024", 1, 1024, 768, 3072, false, false},
    {"fc_proj B*T=1024", 1, 1024, 3072, 768, false, false},
    {"lm_head T=256 (b^T)", 1, 256, 768, 50257, false, true},
    {"bwd dW fc (a^T)", 1, 768, 1024, 3072, true, false},
    {"bwd dx fc (b^T)", 1, 1024, 3072, 768, false, true},
    {"bwd dW qkv (a^T)", 1, 768, 1024, 2304, true, false},
    {"bwd dh lm_head", 1, 256, 50257, 768, false, false},
    {"att q@k^T T=1024 x12", 12, 1024, 64, 1024, false, true},
    {"att p@v T=1024 x12", 12, 1024, 1024, 64, false, false},
    {"att q@k^T T=64 x48", 48, 64, 64, 64, false, true},
    {"att p@v T=64 x48", 48, 64, 64, 64, false, false},
    {"small m=4 qkv", 1, 4, 768, 2304, false, false},
    {"small m=8 qkv", 1, 8, 768, 2304, false, false},
    {"small m=16 qkv", 1, 16, 768, 2304, false, false},
    {"small m=4 lm_head b^T", 1, 4, 768, 50257, false, true},
    {"small m=8 lm_head b^T", 1, 8, 768, 50257, false, true},
    {"gemv lm_head b[768,V]", 1, 1, 768, 50257, false, false},
    {"gemv lm_head b^T[V,768]", 1, 1, 768, 50257, false, true},
    {"gemv qkv", 1, 1, 768, 2304, false, false},
    {"gemv fc", 1, 1, 768, 3072, false, false},
    {"gemv fc_proj", 1, 1, 3072, 768, false, false},
    {"decode q@k^T len=512 x12", 12, 1, 64, 512, false, true, 1024},
    {"decode p@v len=512 x12", 12, 1, 512, 64, false, false, 1024},
};

bool g_cpu_time = false;  // --cpu-time: process CPU seconds / threads instead of wall time

double now() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec)) /
           forge::num_threads();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double median = 0, best = 0;
};

// Runs fn until `budget` seconds or 200 runs have passed (at least 5 runs after a warm-up).
template <typename F>
Timing time_it(F&& fn, double budget) {
  fn();
  std::vector<double> t;
  const double start = now();
  while (t.size() < 5 || (now() - start < budget && t.size() < 200)) {
    const double t0 = now();
    fn();
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

}  // namespace

int main(int argc, char** argv) {
  double peak = 430.0, budget = 0.5;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--peak") && i + 1 < argc)
      peak = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--time") && i + 1 < argc)
      budget = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc)
      filter = argv[++i];
    else if (!std::strcmp(argv[i], "--cpu-time"))
      g_cpu_time = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--peak GFLOPS] [--time SECONDS] [--filter SUBSTRING] [--cpu-time]\n",
                   argv[0]);
      return 2;
    }
  }
  const int threads = forge::num_threads();
#ifdef FORGE_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
#endif
  std::printf("forge gemm (%s) vs OpenBLAS, %d threads, peak %.0f GFLOP/s, median (best)\n",
              gemm::active_kernels().name, threads, peak);
  std::printf("%-26s %-22s %17s %17s %6s %6s %8s\n", "shape", "b,m,k,n", "forge GFLOP/s",
              "OpenBLAS GFLOP/s", "ratio", "%peak", "GB/s(b)");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : kShapes) {
    if (!filter.empty() && std::string(s.name).find(filter) == std::string::npos) continue;
    const int64_t b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    const int64_t b_stored = s.b_stored ? s.b_stored : b_rows;
    std::vector<float> a(s.batch * s.m * s.k), b(s.batch * b_stored * b_cols),
        c(s.batch * s.m * s.n);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    gemm::Problem p;
    p.batch = s.batch;
    p.M = s.m;
    p.N = s.n;
    p.K = s.k;
    p.a = a.data();
    p.lda = s.ta ? s.m : s.k;
    p.stride_a = s.m * s.k;
    p.trans_a = s.ta;
    p.b = b.data();
    p.ldb = b_cols;
    p.stride_b = b_stored * b_cols;
    p.trans_b = s.tb;
    p.c = c.data();
    p.ldc = s.n;
    p.stride_c = s.m * s.n;
    const Timing tf = time_it([&] { gemm::run(p); }, budget);
    const double flops = 2.0 * s.batch * s.m * s.n * s.k;
    const double gf = flops / tf.median * 1e-9, gf_best = flops / tf.best * 1e-9;
    double ob = 0, ob_best = 0;
#ifdef FORGE_HAVE_OPENBLAS
    const Timing to = time_it(
        [&] {
          for (int64_t bi = 0; bi < s.batch; ++bi)
            cblas_sgemm(
                CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f,
                a.data() + bi * p.stride_a, static_cast<int>(p.lda), b.data() + bi * p.stride_b,
                static_cast<int>(p.ldb), 0.0f, c.data() + bi * p.stride_c, static_cast<int>(p.ldc));
        },
        budget);
    ob = flops / to.median * 1e-9;
    ob_best = flops / to.best * 1e-9;
#endif
    char dims[64], fcol[32], ocol[32], gbs[32] = "";
    std::snprintf(dims, sizeof dims, "%ld,%ld,%ld,%ld%s%s", static_cast<long>(s.batch),
                  static_cast<long>(s.m), static_cast<long>(s.k), static_cast<long>(s.n),
                  s.ta ? " aT" : "", s.tb ? " bT" : "");
    std::snprintf(fcol, sizeof fcol, "%.1f (%.1f)", gf, gf_best);
    std::snprintf(ocol, sizeof ocol, "%.1f (%.1f)", ob, ob_best);
    if (s.m == 1)
      std::snprintf(gbs, sizeof gbs, "%.1f", 4.0 * s.batch * s.k * s.n / tf.median * 1e-9);
    std::printf("%-26s %-22s %17s %17s %6.2f %5.0f%% %8s\n", s.name, dims, fcol, ocol,
                ob > 0 ? gf / ob : 0.0, 100.0 * gf / peak, gbs);
    std::fflush(stdout);
  }
  return 0;
}
