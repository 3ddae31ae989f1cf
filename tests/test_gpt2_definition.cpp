// GPT-2 is written once (src/models/gpt2/definition.h): the ops a prefill, a decode step and
// the training forward run are the same ops, fused the same way, dropout aside. The prefill's
// are the ops.h calls it makes (OpTrace), the training forward's the ops its tape recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/gpt2.h"
#include "forge/op_trace.h"
#include "forge/train.h"
#include "gpt2_test_util.h"

namespace forge::test {
namespace {

using gpt2_tests::odd_config;
using gpt2_tests::random_ids;
using gpt2_tests::u32;

/// An in-place function and its out-of-place form are one op (add_ and add).
std::vector<std::string> op_names(std::vector<std::string> ops) {
  for (std::string& s : ops)
    if (!s.empty() && s.back() == '_') s.pop_back();
  return ops;
}

std::vector<std::string> prefill_ops(const gpt2::Model& m, const Tensor& ids) {
  gpt2::KVCache cache(m, ids.dim(0));
  const OpTrace trace;
  (void)m.forward_cached(ids, cache, /*all_logits=*/true);
  return op_names(trace.ops());
}

std::vector<std::string> training_ops(gpt2::Model& m, const Tensor& ids, float dropout) {
  ag::Tape tape;
  std::vector<uint32_t> t = ids.to_vector<uint32_t>();
  std::rotate(t.begin(), t.begin() + 1, t.end());
  const ag::Var loss =
      train::loss_forward(tape, m, train::parameters(m), ids, u32(t, ids.shape()), dropout, 5);
  EXPECT_TRUE(loss.requires_grad());
  return op_names(tape.recorded_ops());
}

TEST(Gpt2Definition, PrefillRunsTheOpsOfTheTrainingForward) {
  const gpt2::Config c = odd_config();
  gpt2::Model m = gpt2::Model::random(c, 3);
  const Tensor ids = u32(random_ids(2 * 9, c.vocab_size, 1), {2, 9});
  const std::vector<std::string> infer = prefill_ops(m, ids);
  std::vector<std::string> train = training_ops(m, ids, 0.0f);

  // What the definition fuses: one layernorm_matmul (block 0's ln_1 + qkv), then per block
  // the attention and the seams, the last block ending in a residual product.
  const auto count = [&](const std::string& op) {
    return std::count(infer.begin(), infer.end(), op);
  };
  EXPECT_EQ(count("layernorm_matmul"), 1);
  EXPECT_EQ(count("attention"), c.n_layer);
  EXPECT_EQ(count("matmul_add_layernorm_matmul"), 2 * c.n_layer - 1);
  EXPECT_EQ(count("matmul_add"), 1);
  ASSERT_FALSE(infer.empty());
  ASSERT_FALSE(train.empty());
  // The head differs by design: training fuses it with the loss.
  EXPECT_EQ(infer.back(), "matmul");
  EXPECT_EQ(train.back(), "lm_head_loss");
  std::vector<std::string> infer_body(infer.begin(), infer.end() - 1);
  train.pop_back();
  EXPECT_EQ(train, infer_body);
  const std::vector<std::string> head = {"embedding", "embedding", "add", "layernorm_matmul",
                                         "attention"};
  ASSERT_GE(infer_body.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(infer_body.begin(), infer_body.begin() + 5), head);
  EXPECT_EQ(infer_body.back(), "layernorm");

  // With dropout, only the embeddings' shows as an op of its own: the others are parts of
  // the fused ops (the attention's probabilities, the seams' residual branches).
  std::vector<std::string> dropped = training_ops(m, ids, 0.1f);
  dropped.pop_back();
  ASSERT_GT(dropped.size(), 3u);
  EXPECT_EQ(dropped[3], "dropout");
  dropped.erase(dropped.begin() + 3);
  EXPECT_EQ(dropped, infer_body);
}

TEST(Gpt2Definition, DecodeStepsRunThePrefillsOps) {
  const gpt2::Config c = odd_config();
  const gpt2::Model m = gpt2::Model::random(c, 3);
  const Tensor prompt = u32(random_ids(5, c.vocab_size, 2), {1, 5});
  const std::vector<std::string> infer = prefill_ops(m, prompt);
  gpt2::KVCache cache(m, 2);
  (void)m.prefill(prompt, cache, 0);
  (void)m.prefill(u32(random_ids(3, c.vocab_size, 4), {1, 3}), cache, 1);
  // Two sequences at different positions: one attention call per sequence and layer.
  const OpTrace trace;
  (void)m.decode({7, 9}, {0, 1}, cache);
  std::vector<std::string> step = op_names(trace.ops());
  std::vector<std::string> want;
  for (const std::string& op : infer) {
    want.push_back(op);
    if (op == "attention") want.push_back(op);
  }
  EXPECT_EQ(step, want);
}

}  // namespace
}  // namespace forge::test
