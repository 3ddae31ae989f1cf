// The one decode path, Model::decode: a batch of sequences, each at its own position in a
// shared KV cache, joining (reset + prefill into a row) and leaving between steps. Every
// sequence's logits match decoding it alone; bad steps are errors that leave the cache as
// it was.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device_test_util.h"
#include "forge/gpt2.h"
#include "gpt2_test_util.h"

namespace forge::test {
namespace {

using gpt2_tests::odd_config;
using gpt2_tests::random_ids;
using gpt2_tests::u32;

TEST(Gpt2BatchDecode, SequencesAtTheirOwnPositionsMatchDecodingAlone) {
  const gpt2::Model m = gpt2::Model::random(odd_config(), 8);
  check_batch_decode(m, m, 1e-5);
}

// The server's promise (forge serve, continuous batching): on the CPU a sequence decoded in
// a batch of any size 1-8 gets exactly the bits it gets decoded alone, whatever its
// neighbours are and wherever they stand; a batch of 12 (the packed GEMM) within 1e-5. A model
// wide enough (C = 128, V = 1000) that the GEMM takes its threaded paths.
TEST(Gpt2BatchDecode, OnTheCpuABatchOfOneToEightGivesTheBitsOfDecodingAlone) {
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 128;
  c.n_ctx = 64;
  c.vocab_size = 1000;
  c.bos_id = c.eos_id = 0;
  const gpt2::Model m = gpt2::Model::random(c, 21);
  const int steps = 5;
  std::vector<std::vector<uint32_t>> prompts;
  std::vector<std::vector<std::vector<float>>> alone;
  for (uint32_t s = 0; s < 12; ++s) {
    prompts.push_back(test_ids(2 + 3 * s, c.vocab_size, 40 + s));  // positions 2 .. 35
    alone.push_back(decode_alone(m, prompts.back(), steps));
  }
  // Past 8 rows the packed GEMM sums in another order: within 1e-5, not bit for bit.
  for (int64_t B : {1, 2, 3, 4, 5, 6, 7, 8, 12}) {
    gpt2::KVCache cache(m, B);
    std::vector<uint32_t> next(static_cast<size_t>(B));
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < B; ++b) {  // sequence b in row B - 1 - b: rows need not be in order
      const auto& p = prompts[static_cast<size_t>(b)];
      (void)m.prefill(Tensor::from_vector(p, {1, static_cast<int64_t>(p.size())}), cache,
                      B - 1 - b);
      next[static_cast<size_t>(b)] = argmax_of(alone[static_cast<size_t>(b)][0]);
      rows.push_back(B - 1 - b);
    }
    for (int k = 1; k <= steps; ++k) {
      const std::vector<float> all = m.decode(next, rows, cache).to_vector<float>();
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<float>& want = alone[static_cast<size_t>(b)][static_cast<size_t>(k)];
        const std::vector<float> got(all.begin() + b * c.vocab_size,
                                     all.begin() + (b + 1) * c.vocab_size);
        if (B <= 8)
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
              << "batch " << B << ", sequence " << b << ", step " << k;
        else
          expect_near(got, want, 1e-5, "batch 12, sequence " + std::to_string(b));
        next[static_cast<size_t>(b)] = argmax_of(want);
      }
    }
  }
}

TEST(Gpt2BatchDecode, BadStepsAreErrorsThatLeaveTheCacheAsItWas) {
  const gpt2::Config c = odd_config();
  const gpt2::Model m = gpt2::Model::random(c, 8);
  gpt2::KVCache cache(m, 2, 6);
  (void)m.prefill(u32(random_ids(5, c.vocab_size, 1), {1, 5}), cache, 0);
  (void)m.prefill(u32(random_ids(2, c.vocab_size, 2), {1, 2}), cache, 1);
  const char* fn = "gpt2::Model::decode";
  EXPECT_FORGE_ERROR(m.decode({1}, {0, 1}, cache), ErrorKind::Shape, fn, "one cache row per token");
  EXPECT_FORGE_ERROR(m.decode({}, {}, cache), ErrorKind::Shape, fn, "one cache row per token");
  EXPECT_FORGE_ERROR(m.decode({1, 2}, {0, 2}, cache), ErrorKind::Range, fn, "row 2 outside [0, 2)");
  EXPECT_FORGE_ERROR(m.decode({1, 2}, {1, 1}, cache), ErrorKind::Range, fn, "named twice");
  EXPECT_FORGE_ERROR(m.decode({1, 203}, {0, 1}, cache), ErrorKind::Range, fn,
                     "token id 203 at index 1 is outside the vocabulary");
  EXPECT_FORGE_ERROR(m.decode({1, 2}, {-1, 1}, cache), ErrorKind::Range, fn, "row -1");
  EXPECT_EQ(cache.length(0), 5);
  EXPECT_EQ(cache.length(1), 2);
  (void)m.decode({1, 2}, {0, 1}, cache);  // row 0 is now full
  EXPECT_FORGE_ERROR(m.decode({1, 2}, {0, 1}, cache), ErrorKind::Range, fn,
                     "6 cached + 1 new tokens in row 0 exceed its capacity of 6");
  EXPECT_EQ(cache.length(0), 6);
  EXPECT_EQ(cache.length(1), 3);
  // forward_cached's prefill needs room in every row.
  EXPECT_FORGE_ERROR(m.forward_cached(u32({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4}), cache),
                     ErrorKind::Range, "gpt2::Model::forward_cached", "kv cache overflow");
  EXPECT_FORGE_ERROR(m.prefill(u32({1, 2}, {2, 1}), cache, 1), ErrorKind::Shape,
                     "gpt2::Model::prefill", "one sequence");
  EXPECT_FORGE_ERROR(m.prefill(u32({1}, {1, 1}), cache, 2), ErrorKind::Range,
                     "gpt2::Model::prefill", "row 2 outside [0, 2)");
  EXPECT_FORGE_ERROR((void)cache.length(2), ErrorKind::Range, "gpt2::KVCache::length", "row 2");
  EXPECT_FORGE_ERROR(cache.reset(-1), ErrorKind::Range, "gpt2::KVCache::reset", "row -1");
  EXPECT_EQ(cache.length(1), 3);
  cache.reset(0);
  EXPECT_EQ(cache.length(0), 0);
  EXPECT_EQ(cache.length(1), 3);
}

}  // namespace
}  // namespace forge::test
