// forge/dist.h's job: alone, rank 0 of 1 whose collectives change nothing; under mpirun
// (CliTrainMpi.TheJobBroadcastsAndSumsAcrossRanks starts this binary on two ranks), rank 0's
// bytes reach every rank (an NCCL id travels this way) and sums add every rank's values.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "forge/dist.h"

namespace {

using namespace forge;

TEST(DistJob, AloneTheCollectivesChangeNothing) {
  dist::Comm& job = dist::job();
  if (job.size() > 1) GTEST_SKIP() << "started by mpirun";
  EXPECT_EQ(job.rank(), 0);
  std::vector<uint8_t> id = {1, 2, 3};
  job.broadcast(id.data(), id.size(), 0);
  EXPECT_EQ(id, (std::vector<uint8_t>{1, 2, 3}));
  double v[2] = {1.5, -2.0};
  job.sum(v, 2);
  EXPECT_EQ(v[0], 1.5);
  EXPECT_EQ(v[1], -2.0);
}

TEST(DistJob, UnderMpirunBroadcastsAndSums) {
  dist::Comm& job = dist::job();
  if (job.size() == 1) GTEST_SKIP() << "one rank: run under mpirun";
  const int r = job.rank();
  // 200 bytes, rank-dependent everywhere but on rank 0 after the broadcast.
  std::vector<uint8_t> id(200);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 7 + 31 * r);
  job.broadcast(id.data(), id.size(), 0);
  for (size_t i = 0; i < id.size(); ++i) ASSERT_EQ(id[i], static_cast<uint8_t>(i * 7)) << i;
  double v[2] = {static_cast<double>(r + 1), 0.5};
  job.sum(v, 2);
  const int n = job.size();
  EXPECT_EQ(v[0], n * (n + 1) / 2.0);
  EXPECT_EQ(v[1], 0.5 * n);
  std::vector<float> g(1000, static_cast<float>(r));
  job.start_sum(g.data(), g.size());
  job.finish();
  for (float x : g) ASSERT_EQ(x, n * (n - 1) / 2.0f);
  job.barrier();
}

}  // namespace
