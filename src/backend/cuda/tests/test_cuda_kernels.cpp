// Kernels compiled at run time: NVRTC (where the library is installed: on the GPU machine;
// CI has none and says so) and a compiled kernel run on each GPU, its results against the
// host's correctly rounded fmaf.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/nvrtc.h"
#include "forge/error.h"

namespace {

using forge::Error;
using forge::ErrorKind;

bool loadable(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

bool nvrtc_installed() {
  return loadable("libnvrtc.so.13") || loadable("libnvrtc.so.12") || loadable("libnvrtc.so.11.2");
}

// y[i] = a * x[i] + y[i], one fused multiply-add per element, for n not a multiple of the
// block (the tail is guarded).
const char* kAxpy = R"(
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaf(a, x[i], y[i]);
}
)";

TEST(CudaNvrtc, WithoutNvrtcCompilingSaysSo) {
  if (nvrtc_installed()) GTEST_SKIP() << "NVRTC is installed here";
  try {
    (void)forge::cuda::nvrtc_version();
    FAIL() << "no error without NVRTC";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_NE(std::string(e.what()).find("NVRTC (CUDA's run-time compiler) is not installed"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaNvrtc, CompilesToPtxAndReportsCompileErrorsWithTheLog) {
  if (!nvrtc_installed()) GTEST_SKIP() << "no NVRTC (libnvrtc.so.13/12/11.2) here";
  const forge::cuda::NvrtcVersion v = forge::cuda::nvrtc_version();
  EXPECT_GE(v.major, 11);
  const forge::cuda::CompiledKernel ptx =
      forge::cuda::nvrtc_compile(kAxpy, "axpy.cu", "compute_80", {"--std=c++17"});
  EXPECT_FALSE(ptx.is_cubin);
  const std::string text(ptx.image.begin(), ptx.image.end());
  EXPECT_NE(text.find(".entry axpy"), std::string::npos);
  EXPECT_NE(text.find("fma.rn.f32"), std::string::npos);
  try {
    (void)forge::cuda::nvrtc_compile("extern \"C\" __global__ void k() { undeclared_name = 1; }",
                                     "broken.cu", "compute_80", {});
    FAIL() << "a broken kernel compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Backend);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("broken.cu does not compile for compute_80"), std::string::npos) << msg;
    EXPECT_NE(msg.find("undeclared_name"), std::string::npos) << msg;  // NVRTC's log
  }
  EXPECT_THROW((void)forge::cuda::nvrtc_compile(kAxpy, "axpy.cu", "ampere", {}), Error);
}

TEST(CudaContext, AKernelCompiledHereRunsOnEveryGpu) {
  const forge::cuda::GpuList gpus = forge::cuda::list_gpus();
  if (gpus.gpus.empty()) GTEST_SKIP() << gpus.why_none;
  if (!nvrtc_installed()) GTEST_SKIP() << "no NVRTC here";
  const int n = (1 << 20) | 3;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = std::sin(0.001f * static_cast<float>(i));
    y[i] = std::cos(0.003f * static_cast<float>(i));
  }
  const float a = 1.7f;
  for (const forge::cuda::GpuInfo& g : gpus.gpus) {
    forge::cuda::Context ctx(g.ordinal);
    const forge::cuda::CompiledKernel k =
        forge::cuda::nvrtc_compile(kAxpy, "axpy.cu", ctx.arch(), {"--std=c++17"});
    ASSERT_TRUE(k.is_cubin);
    forge::cuda::Module module(ctx, k.image);
    forge::cuda::DeviceBuffer dx(ctx, n * sizeof(float)), dy(ctx, n * sizeof(float));
    dx.upload(x.data(), n * sizeof(float));
    dy.upload(y.data(), n * sizeof(float));
    forge::cuda::CUdeviceptr px = dx.address(), py = dy.address();
    float alpha = a;
    int count = n;
    void* params[] = {&alpha, &px, &py, &count};
    const unsigned block = 256;
    forge::cuda::launch(ctx, module.function("axpy"), {(n + block - 1) / block, 1, 1},
                        {block, 1, 1}, 0, params);
    ctx.synchronize();
    std::vector<float> got(n);
    dy.download(got.data(), n * sizeof(float));
    int64_t mismatches = 0;
    for (int i = 0; i < n; ++i) mismatches += got[i] != std::fmaf(a, x[i], y[i]);
    EXPECT_EQ(mismatches, 0) << g.name;
    EXPECT_THROW(module.function("no_such_kernel"), Error);
    EXPECT_THROW(dy.upload(y.data(), (n + 1) * sizeof(float)), Error);
  }
  try {
    forge::cuda::Context bad(static_cast<int>(gpus.gpus.size()));
    FAIL() << "a context for a GPU the driver lacks";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_NE(std::string(e.what()).find("no such GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
