// The CUDA backend as the registry sees it, device-free where it can be: the allocator's
// size classes, the registration (no device and a clear error without a GPU), the embedded
// kernels compiled by NVRTC (where the library is installed) with every kernel the backend
// launches, and the disk cache of compiled images. With a GPU (the GPU machine): the
// allocator's reuse and out-of-memory error, and the precision setting. The ops themselves are
// tested on every device by the op harness (tests/test_ops_reference.cpp).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/nvrtc.h"
#include "cuda_test_util.h"
#include "forge/backend.h"
#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/ops.h"
#include "forge/tensor.h"

namespace {

using forge::Device;
using forge::Error;
using forge::ErrorKind;
using forge::cuda::Allocator;

bool nvrtc_installed() {
  for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}) {
    void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      dlclose(h);
      return true;
    }
  }
  return false;
}

using forge::cuda::test::have_gpu;
using forge::cuda::test::sin_fill;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(CudaAllocator, SizeClassesArePowersOfTwoThenWholeTwoMebibytes) {
  EXPECT_EQ(Allocator::size_class(0), 512u);
  EXPECT_EQ(Allocator::size_class(1), 512u);
  EXPECT_EQ(Allocator::size_class(512), 512u);
  EXPECT_EQ(Allocator::size_class(513), 1024u);
  EXPECT_EQ(Allocator::size_class(3000), 4096u);
  EXPECT_EQ(Allocator::size_class(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(Allocator::size_class((size_t{1} << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(Allocator::size_class(size_t{5} << 20), size_t{6} << 20);
  EXPECT_EQ(Allocator::size_class(size_t{6} << 20), size_t{6} << 20);
  try {
    (void)Allocator::size_class(SIZE_MAX - 5);
    FAIL() << "no error for a size past any memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Backend);
  }
}

TEST(CudaBackendRegistry, IsRegisteredAndWithoutAGpuListsNothingAndSaysWhy) {
  const std::vector<std::string> names = forge::backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
  EXPECT_NE(forge::device_choices().find("cuda:N"), std::string::npos) << forge::device_choices();
  if (have_gpu()) GTEST_SKIP() << "this machine has a GPU";
  for (const forge::DeviceInfo& d : forge::list_devices()) EXPECT_NE(d.device.backend(), "cuda");
  const std::string why = forge::cuda::list_gpus().why_none;
  ASSERT_FALSE(why.empty());
  try {
    (void)forge::Tensor::zeros({4}, forge::DType::F32, Device("cuda", 0));
    FAIL() << "a tensor on cuda:0 without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what() << " / " << why;
  }
}

// Every kernel cuda_ops.cpp, cuda_matmul.cpp and cuda_weights.cpp launch.
const char* const kLaunched[] = {
    "forge_add",
    "forge_gelu",
    "forge_gelu_bwd",
    "forge_scale",
    "forge_dropout",
    "forge_adamw",
    "forge_softmax",
    "forge_softmax_bwd",
    "forge_argmax_rows",
    "forge_layernorm",
    "forge_layernorm_bwd_dx",
    "forge_layernorm_bwd_params_partial",
    "forge_sum_chunks",
    "forge_sum_rows_partial",
    "forge_sumsq_partial",
    "forge_sumsq_final",
    "forge_embedding",
    "forge_scatter_add_rows",
    "forge_gather_nll",
    "forge_ce_bwd",
    "forge_softmax_xent",
    "forge_split_heads",
    "forge_merge_heads",
    "forge_unsplit_head",
    "forge_unmerge_heads",
    "forge_kv_store",
    "forge_attention",
    "forge_attention_tiled",
    "forge_gemv_nn",
    "forge_gemv_nt",
    "forge_widen16",
    "forge_embedding_w",
    "forge_gemv_w16",
    "forge_quantize_rows_q8",
    "forge_matmul_q",
};

TEST(CudaKernels, TheEmbeddedSourceCompilesWithEveryKernelTheBackendLaunches) {
  if (!nvrtc_installed()) GTEST_SKIP() << "no NVRTC (libnvrtc.so.13/12/11.2) here";
  const forge::cuda::CompiledKernel ptx =
      forge::cuda::nvrtc_compile(forge::cuda::kKernelSource, "forge_kernels.cu", "compute_80",
                                 {"--std=c++17", "-default-device"});
  const std::string text(ptx.image.data());
  for (const char* name : kLaunched)
    EXPECT_NE(text.find(std::string(".entry ") + name + "("), std::string::npos) << name;
  EXPECT_EQ(ptx.log.find("warning"), std::string::npos) << ptx.log;
}

TEST(CudaKernels, TheCacheDirectoryFollowsTheEnvironment) {
  ScopedEnv a("FORGE_CACHE_DIR", "/tmp/fc"), b("XDG_CACHE_HOME", "/tmp/xdg"), c("HOME", "/tmp/h");
  EXPECT_EQ(forge::cuda::kernel_cache_dir(), "/tmp/fc/cuda");
  {
    ScopedEnv none("FORGE_CACHE_DIR", nullptr);
    EXPECT_EQ(forge::cuda::kernel_cache_dir(), "/tmp/xdg/forge/cuda");
    ScopedEnv no_xdg("XDG_CACHE_HOME", "");
    EXPECT_EQ(forge::cuda::kernel_cache_dir(), "/tmp/h/.cache/forge/cuda");
    ScopedEnv no_home("HOME", nullptr);
    EXPECT_EQ(forge::cuda::kernel_cache_dir(), "");
  }
}

TEST(CudaKernels, ACompiledImageIsKeptOnDiskAndReadBack) {
  if (!nvrtc_installed()) GTEST_SKIP() << "no NVRTC (libnvrtc.so.13/12/11.2) here";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("forge_cuda_cache_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  ScopedEnv env("FORGE_CACHE_DIR", dir.c_str());
  const std::vector<char> first = forge::cuda::kernel_image("sm_80");
  ASSERT_FALSE(first.empty());
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "cuda")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("sm_80-", 0), 0u) << files[0];
  EXPECT_EQ(std::filesystem::file_size(files[0]), first.size());
  // The second call reads the file: a marker written into it comes back.
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(first.size() - 1));
    f.put('\x5a');
  }
  const std::vector<char> second = forge::cuda::kernel_image("sm_80");
  ASSERT_EQ(second.size(), first.size());
  EXPECT_EQ(second.back(), '\x5a');
  std::filesystem::remove_all(dir);
}

// ---- with a GPU --------------------------------------------------------------------------

TEST(CudaAllocatorOnGpu, FreedBlocksAreReusedAndOutOfMemoryIsAnError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const Device dev("cuda", 0);
  (void)forge::Tensor::zeros({1000}, forge::DType::F32, dev);  // opens the backend
  const uint64_t before = forge::device_stats(dev).allocations;
  for (int i = 0; i < 10; ++i) {
    forge::Tensor t = forge::Tensor::zeros({1000, 1000}, forge::DType::F32, dev);
    EXPECT_EQ(t.to_vector<float>()[999999], 0.0f);
  }
  EXPECT_LE(forge::device_stats(dev).allocations, before + 1);  // one block, reused
  try {
    (void)forge::Tensor::empty({int64_t{1} << 40}, forge::DType::F32, dev);  // 4 TiB
    FAIL() << "4 TiB allocated";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Backend);
    EXPECT_NE(std::string(e.what()).find("cuda:0: out of memory"), std::string::npos) << e.what();
  }
}

// Products of at most 8 rows run as kernels/gemv.cu (decode's products): weights [in, out]
// and [out, in] (the tied head), with bias, GELU and accumulation, against float64; 9 rows
// go back to cuBLASLt. The profile shows which kernel ran.
TEST(CudaMatmulOnGpu, FewRowProductsRunAsGemvAndMatchFloat64) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const Device dev("cuda", 0);
  const double pi = 3.14159265358979;
  auto gelu = [&](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
  };
  struct Case {
    int64_t m, k, n;
    bool trans_b, bias, gelu, accumulate;
    const char* kernel;
  };
  const Case cases[] = {
      {1, 768, 2304, false, true, false, false, "forge_gemv_nn"},
      {3, 3072, 768, false, true, false, true, "forge_gemv_nn"},
      {8, 768, 3072, false, true, true, false, "forge_gemv_nn"},
      {2, 100, 36, false, false, true, true, "forge_gemv_nn"},
      {1, 768, 1003, true, false, false, false, "forge_gemv_nt"},
      {5, 132, 77, true, true, true, true, "forge_gemv_nt"},
      {9, 768, 2304, false, true, false, false, "cublasLt_matmul"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.m << "x" << c.k << "x" << c.n << (c.trans_b ? " nt" : " nn"));
    std::vector<float> a(c.m * c.k), b(c.k * c.n), bias(c.n), acc(c.m * c.n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.05f * std::cos(0.11f * static_cast<float>(i));
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = 0.5f - 0.001f * static_cast<float>(i % 997);
    const float alpha = 0.75f;
    std::vector<double> want(c.m * c.n);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < c.k; ++k)
          s += double(a[i * c.k + k]) * (c.trans_b ? b[j * c.k + k] : b[k * c.n + j]);
        s = alpha * s + (c.bias ? bias[j] : 0.0);
        if (c.gelu) s = gelu(s);
        want[i * c.n + j] = s + (c.accumulate ? acc[i * c.n + j] : 0.0);
      }
    const forge::Tensor ta = forge::Tensor::from_vector(a, {c.m, c.k}, dev);
    const forge::Tensor tb = forge::Tensor::from_vector(
        b, c.trans_b ? forge::Shape{c.n, c.k} : forge::Shape{c.k, c.n}, dev);
    const forge::Tensor tbias =
        c.bias ? forge::Tensor::from_vector(bias, {c.n}, dev) : forge::Tensor();
    forge::MatmulSpec spec;
    spec.trans_b = c.trans_b;
    spec.alpha = alpha;
    spec.gelu = c.gelu;
    forge::set_profiling(dev, true);
    forge::Tensor out;
    if (c.accumulate) {
      out = forge::Tensor::from_vector(acc, {c.m, c.n}, dev);
      forge::matmul_add_(out, ta, tb, spec, tbias);
    } else {
      out = forge::matmul(ta, tb, spec, tbias);
    }
    const std::vector<float> got = out.to_vector<float>();
    const std::vector<forge::KernelTime> times = forge::kernel_times(dev);
    forge::set_profiling(dev, false);
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i])));
    EXPECT_LT(worst, 1e-5);
    const bool ran = std::any_of(times.begin(), times.end(),
                                 [&](const forge::KernelTime& t) { return t.kernel == c.kernel; });
    EXPECT_TRUE(ran) << c.kernel << " did not run";
  }
}

using forge::cuda::test::launches_by_kernel;

// A decode step's seams take the fused few-row kernels: layernorm_matmul is one
// forge_gemv_nn (no forge_layernorm), matmul_add_layernorm_matmul two (no copy of x, no
// layernorm), a query over a cache one forge_attention_split (no forge_kv_store), a prefill
// at head dimension 64 forge_attention_tiled64; 9 rows go back to the composition. Values: against
// the composition on the CPU (the op harness checks them against float64 too).
TEST(CudaFusedOnGpu, DecodeSeamsAndAttentionTakeTheFusedKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const forge::Device dev("cuda", 0), cpu("cpu", 0);
  auto both = [&](const std::vector<float>& v, const forge::Shape& s) {
    return std::pair{forge::Tensor::from_vector(v, s, dev), forge::Tensor::from_vector(v, s, cpu)};
  };
  auto near = [](const forge::Tensor& got, const forge::Tensor& want, double tol) {
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    double worst = 0.0;
    for (size_t i = 0; i < g.size(); ++i)
      worst = std::max(worst, std::abs(double(g[i]) - w[i]) / (1.0 + std::abs(double(w[i]))));
    return worst < tol;
  };
  const int64_t C = 768, N = 2304;
  for (const int64_t rows : {1, 8, 9}) {
    SCOPED_TRACE(testing::Message() << rows << " rows");
    const auto [x, x_c] = both(sin_fill(rows * C, 0.37f, 0.1f), {rows, C});
    const auto [a, a_c] = both(sin_fill(rows * C, 0.21f, -0.2f), {rows, C});
    const auto [g, g_c] = both(sin_fill(C, 0.05f, 1.0f), {C});
    const auto [be, be_c] = both(sin_fill(C, 0.13f, 0.0f), {C});
    const auto [w1, w1_c] = both(sin_fill(C * C, 0.011f, 0.0f), {C, C});
    const auto [w, w_c] = both(sin_fill(C * N, 0.017f, 0.0f), {C, N});
    const auto [bias, bias_c] = both(sin_fill(N, 0.3f, 0.0f), {N});
    const auto [b1, b1_c] = both(sin_fill(C, 0.7f, 0.0f), {C});
    const forge::MatmulSpec spec{.alpha = 0.05f, .gelu = true};
    forge::set_profiling(dev, true);
    const forge::Tensor y = forge::layernorm_matmul(x, g, be, 1e-5f, w, spec, bias);
    const auto ln_launches = launches_by_kernel(dev);
    forge::set_profiling(dev, true);
    const forge::ResidualProduct r =
        forge::matmul_add_layernorm_matmul(x, a, w1, b1, g, be, 1e-5f, w, spec, bias);
    const auto seam_launches = launches_by_kernel(dev);
    forge::set_profiling(dev, false);
    const forge::Tensor y_c = forge::layernorm_matmul(x_c, g_c, be_c, 1e-5f, w_c, spec, bias_c);
    const forge::ResidualProduct r_c = forge::matmul_add_layernorm_matmul(
        x_c, a_c, w1_c, b1_c, g_c, be_c, 1e-5f, w_c, spec, bias_c);
    EXPECT_TRUE(near(y, y_c, 1e-5));
    EXPECT_TRUE(near(r.x, r_c.x, 1e-5));
    EXPECT_TRUE(near(r.out, r_c.out, 1e-5));
    if (rows <= 8) {
      EXPECT_EQ(ln_launches, (std::map<std::string, uint64_t>{{"forge_gemv_nn", 1}}));
      EXPECT_EQ(seam_launches, (std::map<std::string, uint64_t>{{"forge_gemv_nn", 2}}));
    } else {
      EXPECT_EQ(ln_launches.count("forge_layernorm"), 1u);
      EXPECT_EQ(seam_launches.count("forge_layernorm"), 1u);
    }
  }
  // One query (and three) over a cache of 1024 rows at position 700: 16 chunks of keys.
  const int64_t H = 12, hd = 64, cap = 1024, pos = 700;
  for (const int64_t T : {1, 3}) {
    SCOPED_TRACE(testing::Message() << T << " queries");
    const auto [qkv, qkv_c] = both(sin_fill(T * 3 * H * hd, 0.19f, 0.0f), {1, T, 3 * H * hd});
    auto [k, k_c] = both(sin_fill(H * cap * hd, 0.029f, 0.0f), {H, cap, hd});
    auto [v, v_c] = both(sin_fill(H * cap * hd, 0.031f, 0.5f), {H, cap, hd});
    const forge::Tensor at =
        forge::Tensor::from_vector(std::vector<uint32_t>{static_cast<uint32_t>(pos)}, {1}, dev);
    forge::set_profiling(dev, true);
    const forge::Tensor y = forge::attention_at(qkv, H, k, v, at);
    const auto attn_launches = launches_by_kernel(dev);
    forge::set_profiling(dev, false);
    const forge::Tensor y_c = forge::attention(qkv_c, H, k_c, v_c, pos);
    EXPECT_EQ(attn_launches, (std::map<std::string, uint64_t>{{"forge_attention_split", 1}}));
    EXPECT_TRUE(near(y, y_c, 1e-5));
    EXPECT_EQ(k.to_vector<float>(), k_c.to_vector<float>());
    EXPECT_EQ(v.to_vector<float>(), v_c.to_vector<float>());
    // A second launch finds its ticket counters back at zero: the same output again.
    const forge::Tensor y2 = forge::attention_at(qkv, H, k, v, at);
    EXPECT_EQ(y2.to_vector<float>(), y.to_vector<float>());
  }
  // Prefills at head dimension 64: the float4 tiled kernel, against the CPU, with one block
  // per query tile (FORGE_CUDA_SPLIT_ATTENTION=0) and with split keys (the default). Split, 200 and
  // 1024 tokens at batch 1 cut their last tiles' keys over several blocks (combined by the
  // last one to finish); 300 tokens after 37 cached ones cut chunks across rows that see none
  // of a chunk's keys. A second launch gives the same bits (its counters were left at zero).
  for (const auto& c : {std::pair<int64_t, int64_t>{200, 0}, {1024, 0}, {300, 37}})
    for (const bool split : {false, true}) {
      const int64_t T = c.first, start = c.second;
      setenv("FORGE_CUDA_SPLIT_ATTENTION", split ? "1" : "0", 1);
      SCOPED_TRACE(testing::Message()
                   << T << " queries after " << start << (split ? ", split" : ""));
      const auto [qkv, qkv_c] = both(sin_fill(T * 3 * H * hd, 0.23f, 0.0f), {1, T, 3 * H * hd});
      const int64_t rows = start + T;
      auto [k, k_c] = both(sin_fill(H * rows * hd, 0.029f, 0.0f), {H, rows, hd});
      auto [v, v_c] = both(sin_fill(H * rows * hd, 0.031f, 0.5f), {H, rows, hd});
      auto run = [&](const forge::Tensor& q, forge::Tensor& kc, forge::Tensor& vc) {
        return start == 0 ? forge::attention(q, H) : forge::attention(q, H, kc, vc, start);
      };
      forge::set_profiling(dev, true);
      const forge::Tensor y = run(qkv, k, v);
      auto prefill_launches = launches_by_kernel(dev);
      forge::set_profiling(dev, false);
      prefill_launches.erase("forge_kv_store");
      EXPECT_EQ(prefill_launches,
                (std::map<std::string, uint64_t>{{"forge_attention_tiled64", 1}}));
      EXPECT_TRUE(near(y, run(qkv_c, k_c, v_c), 1e-5));
      EXPECT_EQ(run(qkv, k, v).to_vector<float>(), y.to_vector<float>());
      unsetenv("FORGE_CUDA_SPLIT_ATTENTION");
    }
}

// Training's attention gradient at head dimension 64 takes the two tiled kernels under
// precision fp32 (no [T, T] matrix), matches the CPU's composition of the unfused chain's
// rules, and gives the same bits when run again (no atomics). T = 200: three full 64-row tiles
// and a partial one. bf16 takes their tensor-core twins (the _bf16 kernels), or with
// FORGE_CUDA_TC_ATTENTION=0 the fp32 ones; tf32 takes the composition (tensor-core products),
// or with FORGE_CUDA_TC_ATTENTION=1 the _tf32 twins, or with FORGE_CUDA_TILED_ATTENTION_BWD=1
// the fp32 kernels; =0 turns the kernels off under fp32.
TEST(CudaFusedOnGpu, AttentionGradientTakesTheTiledKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const forge::Device dev("cuda", 0), cpu("cpu", 0);
  const int64_t B = 2, T = 200, H = 3, C = H * 64;
  const forge::Tensor qkv_c =
      forge::Tensor::from_vector(sin_fill(B * T * 3 * C, 0.23f, 0.0f), {B, T, 3 * C}, cpu);
  const forge::Tensor dy_c =
      forge::Tensor::from_vector(sin_fill(B * T * C, 0.071f, -0.1f), {B, T, C}, cpu);
  const forge::Tensor y_c = forge::attention(qkv_c, H);
  const forge::Tensor want = forge::attention_bwd(qkv_c, y_c, dy_c, H).to(cpu);
  const forge::Tensor qkv = qkv_c.to(dev), dy = dy_c.to(dev);
  const forge::Tensor y = forge::attention(qkv, H);
  unsetenv("FORGE_CUDA_TILED_ATTENTION_BWD");
  ASSERT_EQ(forge::device_setting(dev, "precision"), "fp32");
  forge::set_profiling(dev, true);
  const forge::Tensor got = forge::attention_bwd(qkv, y, dy, H);
  const auto launches = launches_by_kernel(dev);
  forge::set_profiling(dev, false);
  EXPECT_EQ(launches, (std::map<std::string, uint64_t>{{"forge_attention_bwd_dkv", 1},
                                                       {"forge_attention_bwd_dq", 1}}));
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  double worst = 0.0, largest = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(double(g[i]) - w[i]));
    largest = std::max(largest, std::abs(double(w[i])));
  }
  EXPECT_GT(largest, 0.1);  // a real gradient, not zeros on both sides
  EXPECT_LT(worst, 1e-4 * (1.0 + largest)) << "largest " << largest;
  EXPECT_EQ(forge::attention_bwd(qkv, y, dy, H).to_vector<float>(), g);
  // Which path runs: the tiled kernels' launches, by precision and switches.
  auto tiled_launches = [&](const char* precision, const char* force, const char* tc) {
    forge::set_device_setting(dev, "precision", precision);
    if (force) setenv("FORGE_CUDA_TILED_ATTENTION_BWD", force, 1);
    if (tc) setenv("FORGE_CUDA_TC_ATTENTION", tc, 1);
    forge::set_profiling(dev, true);
    (void)forge::attention_bwd(qkv, y, dy, H).to_vector<float>();
    auto l = launches_by_kernel(dev);
    forge::set_profiling(dev, false);
    unsetenv("FORGE_CUDA_TILED_ATTENTION_BWD");
    unsetenv("FORGE_CUDA_TC_ATTENTION");
    forge::set_device_setting(dev, "precision", "fp32");
    std::erase_if(l, [](const auto& e) { return e.first.find("attention_bwd") == e.first.npos; });
    return l;
  };
  using Launches = std::map<std::string, uint64_t>;
  const Launches fp32_kernels{{"forge_attention_bwd_dkv", 1}, {"forge_attention_bwd_dq", 1}};
  const Launches bf16_kernels{{"forge_attention_bwd_dkv_bf16", 1},
                              {"forge_attention_bwd_dq_bf16", 1}};
  const Launches tf32_kernels{{"forge_attention_bwd_dkv_tf32", 1},
                              {"forge_attention_bwd_dq_tf32", 1}};
  EXPECT_EQ(tiled_launches("tf32", nullptr, nullptr), Launches{});
  EXPECT_EQ(tiled_launches("tf32", nullptr, "1"), tf32_kernels);
  EXPECT_EQ(tiled_launches("tf32", nullptr, "0"), Launches{});
  EXPECT_EQ(tiled_launches("tf32", "1", nullptr), fp32_kernels);
  EXPECT_EQ(tiled_launches("tf32", "0", "1"), Launches{});
  EXPECT_EQ(tiled_launches("fp32", "0", nullptr), Launches{});
  EXPECT_EQ(tiled_launches("fp32", nullptr, nullptr), fp32_kernels);
  EXPECT_EQ(tiled_launches("bf16", nullptr, nullptr), bf16_kernels);
  EXPECT_EQ(tiled_launches("bf16", nullptr, "0"), fp32_kernels);
}

}  // namespace

namespace {

TEST(CudaProfileOnGpu, EachLaunchIsTimedByKernel) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const forge::Device dev("cuda", 0);
  const forge::Tensor a = forge::Tensor::full({512, 512}, 0.5f, dev);
  forge::set_profiling(dev, true);
  const forge::Tensor p = forge::matmul(a, a);
  const forge::Tensor s = forge::add(p, p);
  const forge::Tensor s2 = forge::add(s, p);
  const std::vector<forge::KernelTime> times = forge::kernel_times(dev);
  forge::set_profiling(dev, false);
  std::map<std::string, forge::KernelTime> by_name;
  for (const forge::KernelTime& t : times) by_name[t.kernel] = t;
  ASSERT_EQ(by_name.count("cublasLt_matmul"), 1u);
  ASSERT_EQ(by_name.count("forge_add"), 1u);
  EXPECT_EQ(by_name["cublasLt_matmul"].dispatches, 1u);
  EXPECT_EQ(by_name["forge_add"].dispatches, 2u);
  EXPECT_GT(by_name["cublasLt_matmul"].ms, 0.0);
  EXPECT_GT(by_name["forge_add"].ms, 0.0);
  EXPECT_EQ(s2.to_vector<float>()[7], 3.0f * 128.0f);  // 512 * 0.25 = 128 per product entry
}

}  // namespace

namespace {

// A recorded step: kernels captured once into a CUDA graph, replayed with new inputs the
// host writes first; no host read while recording.
TEST(CudaGraphOnGpu, AReplayRunsTheRecordedKernelsOnTheCurrentInputs) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU here";
  const forge::Device dev("cuda", 0);
  forge::Backend& be = forge::backend_for(dev);
  ASSERT_TRUE(be.can_capture());
  forge::Tensor x = forge::Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}, dev);
  forge::Tensor y;
  be.begin_capture();
  EXPECT_THROW((void)x.to_vector<float>(), Error);
  y = forge::add(forge::matmul(x, x), x);  // x @ x + x; the product's buffer is the graph's
  const std::shared_ptr<forge::Graph> g = be.end_capture();
  const std::vector<float> x2 = {0, 1, 1, 0};
  be.write(*x.storage(), x.byte_offset(), x2.data(), 16);
  be.replay(*g);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));  // swap^2 = I, + x
  const std::vector<float> x3 = {1, 2, 3, 4};
  be.write(*x.storage(), x.byte_offset(), x3.data(), 16);
  be.replay(*g);
  be.replay(*g);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{8, 12, 18, 26}));
}

}  // namespace
