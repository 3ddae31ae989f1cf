// The CUDA backend's run-time loading, device-free: opening libraries by a list of names,
// the errors that name what is missing, and the driver's GPU list. On a machine with the
// NVIDIA driver and a GPU (the GPU machine) the driver tests check what it reports; on
// one without (CI), that the error names libcuda.so.1 or the driver's own reason.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "backend/cuda/driver.h"
#include "backend/cuda/shared_library.h"
#include "forge/error.h"

namespace {

using forge::Error;
using forge::ErrorKind;
using forge::cuda::SharedLibrary;

// The message of the Error `fn` throws, checking its kind ("" and a failure if none).
template <typename Fn>
std::string error_of(Fn fn, ErrorKind kind) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no forge::Error thrown";
  return "";
}

TEST(CudaLoader, OpensTheFirstLibraryThatExistsAndResolvesItsSymbols) {
  const SharedLibrary lib =
      SharedLibrary::open_first({"libforge-absent.so.0", "libm.so.6"}, "the C math library");
  EXPECT_EQ(lib.name(), "libm.so.6");
  const auto cosine = lib.get<double (*)(double)>("cos");
  EXPECT_DOUBLE_EQ(cosine(0.0), 1.0);
  EXPECT_DOUBLE_EQ(cosine(3.141592653589793), -1.0);
  EXPECT_EQ(lib.find("forge_no_such_symbol"), nullptr);
}

TEST(CudaLoader, NoLibraryFoundNamesWhatAndEveryNameTried) {
  const std::string msg = error_of(
      [] {
        SharedLibrary::open_first({"libforge-absent.so.1", "libforge-absent.so.2"}, "the widget");
      },
      ErrorKind::Device);
  EXPECT_NE(msg.find("the widget is not installed or not found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("libforge-absent.so.1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("libforge-absent.so.2"), std::string::npos) << msg;
}

TEST(CudaLoader, AMissingSymbolNamesTheSymbolAndTheLibrary) {
  const SharedLibrary lib = SharedLibrary::open_first({"libm.so.6"}, "the C math library");
  const std::string msg =
      error_of([&] { (void)lib.require("forge_no_such_symbol"); }, ErrorKind::Device);
  EXPECT_NE(msg.find("libm.so.6 has no forge_no_such_symbol"), std::string::npos) << msg;
}

TEST(CudaLoader, AMovedLibraryStaysOpenInItsNewOwner) {
  SharedLibrary a = SharedLibrary::open_first({"libm.so.6"}, "the C math library");
  SharedLibrary b = std::move(a);
  EXPECT_NE(b.find("sqrt"), nullptr);
  EXPECT_EQ(a.find("sqrt"), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST(CudaDriver, ResultsHaveNamesWithOrWithoutTheDriver) {
  EXPECT_NE(
      forge::cuda::result_text(forge::cuda::CUDA_ERROR_NO_DEVICE).find("CUDA_ERROR_NO_DEVICE"),
      std::string::npos);
  EXPECT_NE(forge::cuda::result_text(forge::cuda::CUDA_ERROR_OUT_OF_MEMORY)
                .find("CUDA_ERROR_OUT_OF_MEMORY"),
            std::string::npos);
  const std::string msg =
      error_of([] { forge::cuda::check(forge::cuda::CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2"); },
               ErrorKind::Backend);
  EXPECT_EQ(msg.rfind("cuda: cuMemAlloc_v2: CUDA_ERROR_INVALID_VALUE", 0), 0u) << msg;
  EXPECT_NO_THROW(forge::cuda::check(forge::cuda::CUDA_SUCCESS, "cuInit"));
}

// Whether this machine has the driver, decided without forge's loader.
bool driver_installed() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

TEST(CudaDriver, WithoutTheDriverEveryUseSaysSo) {
  if (driver_installed()) GTEST_SKIP() << "libcuda.so.1 is installed here";
  const std::string msg = error_of([] { (void)forge::cuda::driver(); }, ErrorKind::Device);
  EXPECT_NE(msg.find("the NVIDIA driver (libcuda.so.1) is not installed or not found"),
            std::string::npos)
      << msg;
  const forge::cuda::GpuList list = forge::cuda::list_gpus();
  EXPECT_TRUE(list.gpus.empty());
  EXPECT_EQ(list.why_none, msg);
}

TEST(CudaDriver, WithTheDriverItListsItsGpusOrSaysWhyNone) {
  if (!driver_installed()) GTEST_SKIP() << "no NVIDIA driver (libcuda.so.1) here";
  const forge::cuda::GpuList list = forge::cuda::list_gpus();
  if (list.gpus.empty()) {
    // A driver without a usable GPU (a container without the device): the driver's reason.
    EXPECT_NE(list.why_none.find("cuda: "), std::string::npos) << list.why_none;
    return;
  }
  EXPECT_EQ(list.why_none, "");
  EXPECT_GE(forge::cuda::driver().version, 11000);  // CUDA 11 or later
  for (size_t i = 0; i < list.gpus.size(); ++i) {
    const forge::cuda::GpuInfo& g = list.gpus[i];
    EXPECT_EQ(g.ordinal, static_cast<int>(i));
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.memory_bytes, uint64_t{1} << 30) << g.name;
    EXPECT_GE(g.compute_major, 5) << g.name;
    EXPECT_GT(g.multiprocessors, 0) << g.name;
    std::printf("cuda:%d %s, %.1f GiB, compute %d.%d, %d SMs, driver %d\n", g.ordinal,
                g.name.c_str(), static_cast<double>(g.memory_bytes) / (1 << 30), g.compute_major,
                g.compute_minor, g.multiprocessors, forge::cuda::driver().version);
  }
}

}  // namespace
