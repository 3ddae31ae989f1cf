// NCCL groups of cuda devices (backend/cuda/nccl.h). Device-free: a missing library or one
// without NCCL's entry points is refused by name, with how to point forge at NCCL. On a GPU with
// NCCL (the GPU machine, through tools/gpu_tests.sh): a one-rank group, whose sums are the
// identity, trains exactly as a trainer without one (losses, gradient norms and weights bit for
// bit: the buckets' copies and NCCL's one-rank sum change no bit), and its timeline has every
// bucket's sum.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "backend/cuda/nccl.h"
#include "forge/data.h"
#include "forge/dist.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/tensor.h"
#include "forge/train.h"
#include "train_test_util.h"

namespace {

using namespace forge;

TEST(CudaNccl, ALibraryThatIsNotNcclIsRefusedByName) {
  const std::string missing = cuda::nccl_load_error("/nonexistent/libnccl.so.2");
  EXPECT_NE(missing.find("/nonexistent/libnccl.so.2"), std::string::npos) << missing;
  EXPECT_NE(missing.find("FORGE_NCCL_LIBRARY"), std::string::npos) << missing;
  // A real library without NCCL's entry points.
  const std::string not_nccl = cuda::nccl_load_error("libz.so.1");
  EXPECT_NE(not_nccl.find("ncclGetVersion"), std::string::npos) << not_nccl;
}

TEST(CudaNccl, WithoutNcclTheReasonNamesTheLibrary) {
  const std::string why = cuda::nccl_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "NCCL loads here";
  EXPECT_NE(why.find("libnccl.so.2"), std::string::npos) << why;
  EXPECT_NE(why.find("FORGE_NCCL_LIBRARY"), std::string::npos) << why;
  try {
    cuda::nccl_new_id();
    ADD_FAILURE() << "an id without NCCL";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("NCCL"), std::string::npos) << e.what();
  }
}

TEST(CudaNcclOnGpu, AOneRankGroupTrainsExactlyAsWithoutOne) {
  if (cuda::list_gpus().gpus.empty()) GTEST_SKIP() << "no CUDA GPU here";
  if (const std::string why = cuda::nccl_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(dist::job().size(), 1);
  const Device gpu("cuda", 0);
  const train::Hyper h = test::two_micro_batch_hyper();
  const gpt2::Config cfg = test::tiny_config();
  gpt2::Model alone = gpt2::Model::random(cfg, 5, gpu);
  gpt2::Model grouped = gpt2::Model::random(cfg, 5, gpu);
  train::Trainer ta(alone, h), tg(grouped, h, &dist::job());
  const std::string trace = ::testing::TempDir() + "/cuda_sum_timeline.json";
  std::remove(trace.c_str());
  tg.set_sum_timeline(trace);
  for (int s = 0; s < 4; ++s) {
    const train::StepStats a = ta.step(test::two_micro_batches(s));
    const train::StepStats g = tg.step(test::two_micro_batches(s));
    EXPECT_EQ(g.loss, a.loss) << "step " << s;
    EXPECT_EQ(g.grad_norm, a.grad_norm) << "step " << s;
  }
  test::expect_same_weights(ta, tg);
  std::ifstream f(trace);
  ASSERT_TRUE(f) << trace;
  const nlohmann::json j = nlohmann::json::parse(f);
  int sums = 0, finishes = 0;
  for (const nlohmann::json& e : j.at("traceEvents")) {
    if (e.at("tid") == "sum") {
      ++sums;
      EXPECT_EQ(e.at("ph"), "X");
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    }
    if (e.at("name") == "finish") ++finishes;
  }
  EXPECT_GE(sums, 1);
  EXPECT_EQ(finishes, 1);
}

}  // namespace
