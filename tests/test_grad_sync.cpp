// train::GradSync (src/train/grad_sync.h) over a stand-in for the job: gradients packed into
// buckets of a fixed size in the order they complete, a gradient larger than what is left of
// a bucket split over several, each bucket's sum started when it is full, and the sums
// written back into the gradients. The stand-in job has 3 ranks holding equal gradients, so
// each sum is 3 times the rank's own.
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

#include "forge/autograd.h"
#include "forge/dist.h"
#include "forge/error.h"
#include "train/grad_sync.h"

namespace {

using namespace forge;

class ThreeEqualRanks final : public dist::Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 3; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 3; }
  void start_sum(float* data, size_t n) override {
    started.push_back(n);
    pending.push_back({data, n});
  }
  void progress() override { ++progress_calls; }
  void finish() override {
    for (const auto& [data, n] : pending)
      for (size_t i = 0; i < n; ++i) data[i] *= 3.0f;
    pending.clear();
  }
  void sum(double* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] *= 3.0;
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int) override { throw std::logic_error("abort"); }

  std::vector<size_t> started;  // each sum's length, in order
  std::vector<std::pair<float*, size_t>> pending;
  int progress_calls = 0;
};

/// A parameter [1, n] with a gradient: that of the cross-entropy of its row as logits.
ag::Parameter with_grad(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.1f * static_cast<float>(i);
  ag::Parameter p(Tensor::from_vector(v, {1, static_cast<int64_t>(n)}), "p");
  ag::Tape tape;
  tape.backward(
      ag::cross_entropy(tape.param(p), Tensor::from_vector(std::vector<uint32_t>{0}, {1})));
  return p;
}

TEST(GradSync, PacksSplitsAndSumsBucketsInTheOrderGradientsComplete) {
  const std::vector<ag::Parameter> params = {with_grad(12, 0.5f), with_grad(5, -1.0f),
                                             with_grad(3, 2.0f)};
  ThreeEqualRanks job;
  train::GradSync sync(job, params, 8 * sizeof(float));  // buckets of 8 floats
  for (int step = 0; step < 2; ++step) {                 // the buffers are reused
    std::vector<std::vector<float>> own;
    for (const ag::Parameter& p : params) own.push_back(p.grad().to_vector<float>());
    // Completed in the order 1, 0, 2: 5 + 12 + 3 floats -> buckets of 8, 8 and 4.
    sync.ready(params[1]);
    sync.ready(params[0]);
    EXPECT_EQ(job.started, (std::vector<size_t>{8, 8}));  // the full buckets went at once
    sync.ready(params[2]);
    EXPECT_EQ(job.started, (std::vector<size_t>{8, 8}));  // the last is not full
    sync.finish();
    EXPECT_EQ(job.started, (std::vector<size_t>{8, 8, 4}));
    EXPECT_EQ(job.progress_calls, 3 * (step + 1));
    for (size_t k = 0; k < params.size(); ++k) {
      const std::vector<float> got = params[k].grad().to_vector<float>();
      ASSERT_EQ(got.size(), own[k].size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 3.0f * own[k][i]) << k << " " << i;
    }
    job.started.clear();
  }
}

TEST(GradSync, RefusesAParameterItWasNotMadeFor) {
  const std::vector<ag::Parameter> params = {with_grad(4, 0.0f)};
  ThreeEqualRanks job;
  train::GradSync sync(job, params, 1024);
  EXPECT_THROW(sync.ready(with_grad(4, 0.0f)), Error);  // not one of the trained parameters
}

}  // namespace
