// The one decode path, Model::decode: a batch of sequences, each at its own position in a
// shared KV cache, joining (reset + prefill into a row) and leaving between steps. Every
// sequence's logits match decoding it alone; bad steps are errors that leave the cache as
// it was.
#include <gtest/gtest.h>

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
