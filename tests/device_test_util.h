// What the end-to-end tests share, on any device: a tolerance check of float vectors,
// greedy decoding three ways (forward_cached step by step, its logits, GreedyDecoder), a
// batch of sequences decoded at their own positions, and the same training steps of a tiny
// model (losses, grad norms, final weights).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "forge/data.h"
#include "forge/forge.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/train.h"

namespace forge::test {

/// Every |got - want| <= tol + rel * |want| (rel: a bound relative to each element, for
/// outputs such as probabilities whose values are far below any useful absolute bound).
inline void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tol,
                        const std::string& what, double rel = 0.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = tol + rel * std::fabs(want[i]);
    if (!(err <= bound)) {
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - bound;
      if (bad == 1 || excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": worst at " << worst << ": got " << got[worst] << ", want "
                     << want[worst] << " (bound " << tol << " + " << rel << " * |want|)";
}

inline std::vector<uint32_t> greedy_cached(const gpt2::Model& m,
                                           const std::vector<uint32_t>& prompt, int n) {
  gpt2::KVCache cache(m, 1);
  Tensor logits = m.forward_cached(
      Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())}), cache);
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> row = logits.to_vector<float>();
    const uint32_t id =
        static_cast<uint32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(id);
    if (i + 1 < n)
      logits = m.forward_cached(Tensor::from_vector(std::vector<uint32_t>{id}, {1, 1}), cache);
  }
  return out;
}

/// Logits of a prefill of `prompt` and of n greedy decode steps after it, each [V].
inline std::vector<std::vector<float>> greedy_logits(const gpt2::Model& m, gpt2::KVCache& cache,
                                                     const std::vector<uint32_t>& prompt, int n) {
  cache.reset();
  Tensor logits = m.forward_cached(
      Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())}), cache);
  std::vector<std::vector<float>> out;
  for (int i = 0; i <= n; ++i) {
    out.push_back(logits.to_vector<float>());
    const auto& row = out.back();
    const uint32_t id =
        static_cast<uint32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    if (i < n)
      logits = m.forward_cached(Tensor::from_vector(std::vector<uint32_t>{id}, {1, 1}), cache);
  }
  return out;
}

/// Sets FORGE_DECODE_GRAPH for the scope of one test.
struct DecodeGraphSwitch {
  explicit DecodeGraphSwitch(bool on) { setenv("FORGE_DECODE_GRAPH", on ? "1" : "0", 1); }
  ~DecodeGraphSwitch() { unsetenv("FORGE_DECODE_GRAPH"); }
};

/// The prompt's greedy continuation of n tokens: the first from the prefill's logits, the
/// rest from a GreedyDecoder (which may run one step past the last token wanted).
inline std::vector<uint32_t> greedy_decoded(const gpt2::Model& m, gpt2::KVCache& cache,
                                            const std::vector<uint32_t>& prompt, int n) {
  cache.reset();
  const Tensor logits = m.forward_cached(
      Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())}), cache);
  std::vector<uint32_t> out = {argmax_rows(logits).to_vector<uint32_t>()[0]};
  gpt2::GreedyDecoder decoder(m, cache, out[0], cache.capacity() - cache.length());
  while (static_cast<int>(out.size()) < n) out.push_back(decoder.next());
  return out;
}

/// Per-step losses and grad norms of `steps` optimizer steps (dropout on, `micro`
/// micro-batches of 2 x seq tokens) of a random-init model of `c` on `options.device`, and its
/// final weights.
struct TrainRun {
  std::vector<double> loss, grad_norm;
  std::vector<std::vector<float>> weights;
};

inline TrainRun train_run(const gpt2::Config& c, const gpt2::ModelOptions& options, int steps,
                          int64_t seq = 16, int64_t micro = 2) {
  gpt2::Model model = gpt2::Model::random(c, 5, options);
  train::Hyper h;
  h.steps = steps;
  h.batch = 2 * micro;
  h.micro_batch = 2;
  h.seq = seq;
  h.lr = 3e-3;
  h.warmup = 2;
  h.dropout = 0.1f;
  h.seed = 99;
  train::Trainer trainer(model, h);
  auto tokens = std::make_shared<std::vector<uint32_t>>();
  for (uint32_t i = 0; i < 4096; ++i)
    tokens->push_back(
        static_cast<uint32_t>(dropout_hash(3, i) % static_cast<uint64_t>(c.vocab_size)));
  data::BatchSampler sampler(tokens, h.micro_batch, h.seq, 17);
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    std::vector<data::Batch> batches;
    for (int64_t i = 0; i < micro; ++i) batches.push_back(sampler.next());
    const train::StepStats st = trainer.step(batches);
    EXPECT_FALSE(st.skipped) << "step " << s;
    r.loss.push_back(st.loss);
    r.grad_norm.push_back(st.grad_norm);
  }
  for (const ag::Parameter& p : trainer.params()) r.weights.push_back(p.value().to_vector<float>());
  return r;
}

inline void expect_same_training(const TrainRun& got, const TrainRun& want, const std::string& what,
                                 bool weights = true) {
  ASSERT_EQ(got.loss.size(), want.loss.size()) << what;
  for (size_t i = 0; i < want.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], want.loss[i], 1e-4 * want.loss[i]) << what << ": loss of step " << i;
    EXPECT_NEAR(got.grad_norm[i], want.grad_norm[i], 1e-3 * want.grad_norm[i])
        << what << ": grad norm of step " << i;
  }
  // The weights after every update: the optimizer ran the same way. (Not for a large model: AdamW's
  // first steps move each weight by ~lr times the sign of its gradient, so a gradient that is ~0 up
  // to rounding may move either way.)
  if (!weights) return;
  std::vector<float> g, w;
  for (const auto& v : got.weights) g.insert(g.end(), v.begin(), v.end());
  for (const auto& v : want.weights) w.insert(w.end(), v.begin(), v.end());
  expect_near(g, w, 1e-4, what + ": final weights");
}

/// n token ids in [0, V), a different run of them for each seed.
inline std::vector<uint32_t> test_ids(int64_t n, int64_t V, uint32_t seed) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<uint32_t>((i * 389u + seed * 7919u + 11u) % static_cast<uint64_t>(V));
  return v;
}

inline uint32_t argmax_of(const std::vector<float>& row) {
  return static_cast<uint32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

/// One sequence decoded alone (a cache of one row): the logits after its prompt and after
/// each of `steps` greedy tokens.
inline std::vector<std::vector<float>> decode_alone(const gpt2::Model& m,
                                                    const std::vector<uint32_t>& prompt,
                                                    int steps) {
  gpt2::KVCache cache(m, 1);
  std::vector<std::vector<float>> out;
  out.push_back(
      m.forward_cached(Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())}), cache)
          .to_vector<float>());
  for (int i = 0; i < steps; ++i)
    out.push_back(
        m.forward_cached(Tensor::from_vector(std::vector<uint32_t>{argmax_of(out.back())}, {1, 1}),
                         cache)
            .to_vector<float>());
  return out;
}

/// Model::decode of a batch of sequences at their own positions in one cache of 3 rows,
/// joining (reset + prefill into a row) and leaving between steps, in any row order, and
/// forward_cached's T = 1 step over rows at different positions: every sequence's logits
/// within `tol` of `ref` decoding it alone.
inline void check_batch_decode(const gpt2::Model& m, const gpt2::Model& ref, double tol) {
  const gpt2::Config& c = m.config();
  const int64_t V = c.vocab_size;
  // Prompts of 3, 7 and 5 tokens; a fourth joins in row 1 when the second leaves.
  const std::vector<std::vector<uint32_t>> prompts = {test_ids(3, V, 1), test_ids(7, V, 2),
                                                      test_ids(5, V, 3), test_ids(4, V, 4)};
  std::vector<std::vector<std::vector<float>>> want;
  for (const auto& p : prompts) want.push_back(decode_alone(ref, p, 8));

  gpt2::KVCache cache(m, 3);
  std::map<int64_t, size_t> seq_of_row;  // row -> sequence
  std::vector<int> done(prompts.size(), 0);
  std::vector<uint32_t> next(prompts.size());
  auto join = [&](size_t s, int64_t row) {
    cache.reset(row);
    const std::vector<float> got =
        m.prefill(Tensor::from_vector(prompts[s], {1, static_cast<int64_t>(prompts[s].size())}),
                  cache, row)
            .to_vector<float>();
    expect_near(got, want[s][0], tol, "prefill of sequence " + std::to_string(s));
    EXPECT_EQ(cache.length(row), static_cast<int64_t>(prompts[s].size()));
    next[s] = argmax_of(want[s][0]);
    seq_of_row[row] = s;
  };
  auto step = [&](const std::vector<int64_t>& rows) {
    std::vector<uint32_t> tokens;
    for (int64_t r : rows) tokens.push_back(next[seq_of_row.at(r)]);
    const Tensor logits = m.decode(tokens, rows, cache);
    ASSERT_EQ(logits.shape(), Shape({static_cast<int64_t>(rows.size()), V}));
    const std::vector<float> all = logits.to_vector<float>();
    for (size_t i = 0; i < rows.size(); ++i) {
      const size_t s = seq_of_row.at(rows[i]);
      const int k = ++done[s];
      const std::vector<float> got(all.begin() + static_cast<int64_t>(i) * V,
                                   all.begin() + static_cast<int64_t>(i + 1) * V);
      expect_near(got, want[s][static_cast<size_t>(k)], tol,
                  "sequence " + std::to_string(s) + " step " + std::to_string(k));
      EXPECT_EQ(cache.length(rows[i]), static_cast<int64_t>(prompts[s].size()) + k);
      next[s] = argmax_of(want[s][static_cast<size_t>(k)]);
    }
  };
  join(0, 0);
  join(1, 1);
  step({0, 1});  // rows at positions 3 and 7
  join(2, 2);
  step({0, 1, 2});
  step({2, 0, 1});  // any order
  step({0, 2});     // row 1 waits a step: it keeps its length
  EXPECT_EQ(cache.length(1), 7 + 3);
  step({1});
  join(3, 1);  // sequence 1 leaves; sequence 3 takes its row
  step({0, 1, 2});
  step({1, 2});
  step({0, 1, 2});
  // forward_cached's decode step is the same path: every row at its own position.
  std::vector<uint32_t> tokens;
  for (int64_t r = 0; r < 3; ++r) tokens.push_back(next[seq_of_row.at(r)]);
  const std::vector<float> all =
      m.forward_cached(Tensor::from_vector(tokens, {3, 1}), cache).to_vector<float>();
  for (int64_t r = 0; r < 3; ++r) {
    const size_t s = seq_of_row.at(r);
    const std::vector<float> got(all.begin() + r * V, all.begin() + (r + 1) * V);
    expect_near(got, want[s][static_cast<size_t>(++done[s])], tol,
                "forward_cached row " + std::to_string(r));
  }
}

}  // namespace forge::test
