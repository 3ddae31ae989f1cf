// Sampling (forge/sampling.h) and the generation loop (forge/generate.h).
//
// References are independent of the code under test: argmax by a plain loop, softmax(l / T)
// in double, HF's repetition penalty worked out by hand, mt19937_64's output fixed by the
// C++ standard, and greedy generation re-derived from full forward passes without a cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/sampling.h"

namespace {

using forge::Error;
using forge::Sampler;
using forge::SamplingParams;
using Ids = std::vector<uint32_t>;

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 g(seed);
  std::vector<float> l(n);
  for (float& x : l) x = scale * (static_cast<float>(g() >> 40) / 16777216.0f * 2.0f - 1.0f);
  return l;
}

uint32_t loop_argmax(const std::vector<float>& l) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < l.size(); ++i)
    if (l[i] > l[best]) best = i;
  return best;
}

SamplingParams params(float t, int64_t k, float p, float r = 1.0f, uint64_t seed = 0) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.repeat_penalty = r;
  s.seed = seed;
  return s;
}

TEST(Sampling, GreedyIsArgmax) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> l = random_logits(1000, seed);
    SamplingParams g;
    g.greedy = true;
    Sampler s(g);
    EXPECT_EQ(s.sample(l, {}), loop_argmax(l));
    EXPECT_EQ(forge::argmax(l), loop_argmax(l));
    Sampler t0(params(0.0f, 0, 1.0f, 1.0f, seed));  // temperature 0 is greedy too
    EXPECT_EQ(t0.sample(l, {}), loop_argmax(l));
  }
}

TEST(Sampling, ArgmaxTiesAndNaN) {
  EXPECT_EQ(forge::argmax(std::vector<float>{1, 3, 3, 2}), 1u);  // the first of equals
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(forge::argmax(std::vector<float>{nan, -5, 2, nan}), 2u);
  EXPECT_EQ(forge::argmax(std::vector<float>{nan, nan}), 0u);
  // Lengths around argmax's 16-lane blocks: the maximum in the tail, in a later block but an
  // earlier lane than an equal one, at the last index; -inf and NaN only; signed zeros.
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {1u, 15u, 16u, 17u, 37u, 50257u}) {
    SCOPED_TRACE(n);
    std::vector<float> l = random_logits(n, n);
    EXPECT_EQ(forge::argmax(l), loop_argmax(l));
    l[n - 1] = 9.0f;
    EXPECT_EQ(forge::argmax(l), n - 1);
    if (n > 20) {
      l[20] = 9.0f;  // block 1, lane 4
      l[3] = 9.0f;   // block 0, lane 3
      EXPECT_EQ(forge::argmax(l), 3u);
      l[3] = nan;
      EXPECT_EQ(forge::argmax(l), 20u);
    }
    std::vector<float> low(n, -inf);
    for (size_t i = 0; i < n; i += 3) low[i] = nan;
    EXPECT_EQ(forge::argmax(low), 0u);
    std::vector<float> zeros(n, -1.0f);
    zeros[n / 2] = -0.0f;
    zeros[n - 1] = 0.0f;
    EXPECT_EQ(forge::argmax(zeros), n / 2);
  }
}

TEST(Sampling, TopK1IsGreedy) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> l = random_logits(500, seed + 100);
    Sampler s(params(1.5f, 1, 1.0f, 1.0f, seed));
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(l, {}), loop_argmax(l));
  }
}

TEST(Sampling, TinyTopPIsGreedy) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> l = random_logits(500, seed + 200);
    Sampler s(params(1.0f, 0, 1e-6f, 1.0f, seed));
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(l, {}), loop_argmax(l));
  }
}

// Empirical frequencies of many seeded draws against softmax(l / T) in double. With n draws
// the standard error of a frequency is <= 0.5 / sqrt(n) ≈ 0.0016 here; the bound is 4x that.
void expect_matches(const std::vector<float>& l, const SamplingParams& sp,
                    const std::map<uint32_t, double>& want, int n = 100000) {
  Sampler s(sp);
  std::map<uint32_t, int> count;
  for (int i = 0; i < n; ++i) ++count[s.sample(l, {})];
  for (const auto& [id, c] : count)
    EXPECT_TRUE(want.count(id)) << "id " << id << " drawn " << c << " times, expected never";
  for (const auto& [id, p] : want)
    EXPECT_NEAR(static_cast<double>(count[id]) / n, p, 0.0065) << "id " << id;
}

std::map<uint32_t, double> softmax_ref(const std::vector<float>& l, double t, const Ids& keep) {
  double z = 0;
  for (uint32_t i : keep) z += std::exp(static_cast<double>(l[i]) / t);
  std::map<uint32_t, double> p;
  for (uint32_t i : keep) p[i] = std::exp(static_cast<double>(l[i]) / t) / z;
  return p;
}

TEST(Sampling, TemperatureMatchesSoftmax) {
  const std::vector<float> l = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  const Ids all = {0, 1, 2, 3, 4, 5};
  for (float t : {0.5f, 1.0f, 2.0f})
    expect_matches(l, params(t, 0, 1.0f, 1.0f, 7), softmax_ref(l, t, all));
}

TEST(Sampling, TopKKeepsTheKLargest) {
  const std::vector<float> l = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  expect_matches(l, params(1.0f, 3, 1.0f, 1.0f, 3), softmax_ref(l, 1.0, {1, 4, 0}));
}

TEST(Sampling, TopPKeepsTheSmallestNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (as logits: their logs).
  const std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  auto d = forge::candidate_distribution(l, {}, params(1.0f, 0, 0.75f));
  ASSERT_EQ(d.size(), 2u);  // 0.5 < 0.75 <= 0.5 + 0.3
  EXPECT_EQ(d[0].first, 1u);
  EXPECT_EQ(d[1].first, 3u);
  EXPECT_NEAR(d[0].second, 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(d[1].second, 0.3 / 0.8, 1e-6);
  d = forge::candidate_distribution(l, {}, params(1.0f, 0, 0.9f));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[2].first, 0u);
  EXPECT_NEAR(d[2].second, 0.15 / 0.95, 1e-6);
  d = forge::candidate_distribution(l, {}, params(1.0f, 0, 1.0f));
  ASSERT_EQ(d.size(), 4u);
  EXPECT_NEAR(d[3].second, 0.05, 1e-6);
  expect_matches(l, params(1.0f, 0, 0.75f, 1.0f, 11), {{1, 0.625}, {3, 0.375}});
  // top-k first, then top-p over what is left: k = 3 drops 0.05; p = 0.9 of 0.95 needs all 3.
  d = forge::candidate_distribution(l, {}, params(1.0f, 3, 0.9f));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[0].second, 0.5 / 0.95, 1e-6);
}

TEST(Sampling, TopPOnALargeVocabGrowsTheSortedPrefix) {
  // Flat logits over 50k ids: the nucleus needs thousands of candidates (past the first
  // partially sorted block); compare with a full sort done here.
  const std::vector<float> l = random_logits(50257, 5, 0.5f);
  const auto d = forge::candidate_distribution(l, {}, params(0.9f, 0, 0.5f));
  std::vector<std::pair<double, uint32_t>> ref;
  double z = 0;
  for (uint32_t i = 0; i < l.size(); ++i) {
    const double w = std::exp(static_cast<double>(l[i]) / 0.9);
    ref.push_back({w, i});
    z += w;
  }
  std::sort(ref.begin(), ref.end(), [](auto& a, auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  size_t keep = 0;
  for (double cum = 0; cum < 0.5 * z; ++keep) cum += ref[keep].first;
  ASSERT_GT(keep, 2000u);
  ASSERT_NEAR(static_cast<double>(d.size()), static_cast<double>(keep), 1.0);
  for (size_t i = 0; i + 1 < d.size(); ++i) ASSERT_EQ(d[i].first, ref[i].second) << i;
}

TEST(Sampling, RepetitionPenaltyIsHFs) {
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  forge::apply_repetition_penalty(l, Ids{0, 1, 1, 4}, 2.0f);  // id 1 twice: penalized once
  EXPECT_EQ(l, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, 0.0f}));
  std::vector<float> m = {2.0f, -1.0f};
  forge::apply_repetition_penalty(m, Ids{0, 1}, 0.5f);  // R < 1 encourages repeats
  EXPECT_EQ(m, (std::vector<float>{4.0f, -0.5f}));
  // In the sampler: greedy would pick id 0 (2.0) but the penalty makes it 1.0 < 1.5.
  const std::vector<float> g = {2.0f, 1.5f, -3.0f};
  SamplingParams sp;
  sp.greedy = true;
  sp.repeat_penalty = 2.0f;
  Sampler s(sp);
  EXPECT_EQ(s.sample(g, Ids{0}), 1u);
  EXPECT_EQ(s.sample(g, Ids{}), 0u);
  const auto d = forge::candidate_distribution(g, Ids{0, 2}, params(1.0f, 0, 1.0f, 2.0f));
  const double z = std::exp(1.0) + std::exp(1.5) + std::exp(-6.0);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].first, 1u);
  EXPECT_NEAR(d[0].second, std::exp(1.5) / z, 1e-9);
  EXPECT_NEAR(d[2].second, std::exp(-6.0) / z, 1e-9);
}

// OpenAI's penalties: logit -= count * frequency + presence, over the generated ids only.
TEST(Sampling, FrequencyAndPresencePenaltiesAreOpenAIs) {
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f};
  forge::apply_frequency_penalties(l, Ids{3, 1, 3, 3}, 0.5f, 0.25f);
  EXPECT_EQ(l, (std::vector<float>{2.0f, -1.75f, 0.5f, 1.25f}));  // 1: -0.5 - 0.25; 3: -1.5 - 0.25
  // In the sampler: the prompt (context) is not penalized, the generated ids are.
  SamplingParams sp;
  sp.greedy = true;
  sp.frequency_penalty = 1.0f;
  Sampler s(sp);
  const std::vector<float> g = {2.0f, 1.5f};
  EXPECT_EQ(s.sample(g, Ids{0, 0, 0}), 0u);       // only a prompt: no penalty
  EXPECT_EQ(s.sample(g, Ids{0, 0}, Ids{0}), 1u);  // 2 - 1 < 1.5
  sp.frequency_penalty = 0.0f;
  sp.presence_penalty = -2.0f;  // negative: encourages repeats
  Sampler t(sp);
  EXPECT_EQ(t.sample(g, Ids{1}, Ids{1}), 1u);
  EXPECT_TRUE(sp.has_penalty());
  for (float bad : {2.5f, -2.01f, std::numeric_limits<float>::quiet_NaN()}) {
    SamplingParams b;
    b.frequency_penalty = bad;
    EXPECT_THROW(Sampler{b}, Error);
    b.frequency_penalty = 0;
    b.presence_penalty = bad;
    EXPECT_THROW(Sampler{b}, Error);
  }
}

// Log-probabilities against a float64 log-softmax, and the top ones in order.
TEST(Sampling, TokenLogprobsAreTheModelsLogSoftmax) {
  const std::vector<float> l = random_logits(3000, 11, 3.0f);
  double mx = -1e300, z = 0;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  for (float x : l) z += std::exp(static_cast<double>(x) - mx);
  const auto r = forge::token_logprobs(l, 17, 5);
  EXPECT_EQ(r.id, 17u);
  EXPECT_NEAR(r.logprob, static_cast<double>(l[17]) - mx - std::log(z), 1e-9);
  ASSERT_EQ(r.top.size(), 5u);
  EXPECT_EQ(r.top[0].first, forge::argmax(l));
  for (size_t i = 1; i < 5; ++i) EXPECT_GE(r.top[i - 1].second, r.top[i].second);
  for (const auto& [id, lp] : r.top)
    EXPECT_NEAR(lp, static_cast<double>(l[id]) - mx - std::log(z), 1e-9);
  EXPECT_TRUE(forge::token_logprobs(l, 0, 0).top.empty());
  EXPECT_THROW(forge::token_logprobs(l, 3000, 1), Error);
  EXPECT_THROW(forge::token_logprobs(l, 0, -1), Error);
  EXPECT_THROW(forge::token_logprobs(std::vector<float>{}, 0, 1), Error);
}

TEST(Sampling, UniformIsMt19937_64sStandardOutput) {
  // The C++ standard fixes mt19937_64's output: the first value for the default seed 5489
  // is 14514284786278117030, the 10000th is 9981545732273789042.
  SamplingParams sp;
  sp.seed = 5489;
  Sampler s(sp);
  EXPECT_EQ(s.uniform(), static_cast<double>(14514284786278117030ull >> 11) * 0x1.0p-53);
  for (int i = 1; i < 9999; ++i) s.uniform();
  EXPECT_EQ(s.uniform(), static_cast<double>(9981545732273789042ull >> 11) * 0x1.0p-53);
}

TEST(Sampling, SameSeedSameDraws) {
  const std::vector<float> l = random_logits(2000, 9, 2.0f);
  auto draws = [&](uint64_t seed) {
    Sampler s(params(0.9f, 50, 0.95f, 1.3f, seed));
    Ids out, ctx;
    for (int i = 0; i < 200; ++i) {
      out.push_back(s.sample(l, ctx));
      ctx.push_back(out.back());
    }
    return out;
  };
  EXPECT_EQ(draws(42), draws(42));
  EXPECT_NE(draws(42), draws(43));
}

TEST(Sampling, InvalidParamsThrow) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const SamplingParams& p :
       {params(-0.1f, 0, 1.0f), params(nan, 0, 1.0f), params(inf, 0, 1.0f), params(1, -1, 1.0f),
        params(1, 0, 0.0f), params(1, 0, 1.5f), params(1, 0, -0.5f), params(1, 0, nan),
        params(1, 0, 1.0f, 0.0f), params(1, 0, 1.0f, -1.0f), params(1, 0, 1.0f, nan)}) {
    try {
      Sampler s(p);
      ADD_FAILURE() << "accepted t=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p
                    << " r=" << p.repeat_penalty;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("sampling: ", 0), 0u) << e.what();
      EXPECT_EQ(e.kind(), forge::ErrorKind::Range);
    }
  }
  Sampler s(SamplingParams{});
  EXPECT_THROW(s.sample(std::vector<float>{}, {}), Error);
  EXPECT_THROW(s.sample(std::vector<float>{1, 2}, Ids{2}), Error);  // context id >= V
  std::vector<float> l = {1, 2};
  EXPECT_THROW(forge::apply_repetition_penalty(l, Ids{5}, 1.2f), Error);
  EXPECT_THROW(forge::apply_repetition_penalty(l, Ids{}, 0.0f), Error);
  EXPECT_THROW(forge::argmax(std::vector<float>{}), Error);
}

// ---- the generation loop ----------------------------------------------------------------------

forge::gpt2::Model tiny_model(int64_t eos = 255) {
  forge::gpt2::Config c = forge::gpt2::Config::preset("tiny");
  c.eos_id = eos;
  return forge::gpt2::Model::random(c, 3);
}

// Every entry point that takes token ids checks them the same way (Config::check_token_ids):
// Error(Range) naming the entry point, the id, where it is and the vocabulary size.
TEST(Generate, EveryEntryPointChecksTokenIdsOneWay) {
  const forge::gpt2::Model m = tiny_model();  // vocab_size 256
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), forge::ErrorKind::Range) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  const std::string tail = "is outside the vocabulary (vocab_size = 256)";
  const forge::Tensor bad = forge::Tensor::from_vector(Ids{1, 2, 3, 256, 5, 6}, {2, 3});
  EXPECT_EQ(message([&] { m.forward(bad); }),
            "gpt2::Model::forward: token id 256 at [1, 0] " + tail);
  forge::gpt2::KVCache cache(m, 2, 8);
  EXPECT_EQ(message([&] { m.forward_cached(bad, cache); }),
            "gpt2::Model::forward_cached: token id 256 at [1, 0] " + tail);
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(message([&] {
              forge::gpt2::evaluate(m, Ids{1, 2, 300});
            }),
            "gpt2::evaluate: token id 300 at index 2 " + tail);
  forge::gpt2::KVCache one(m, 1, 8);
  EXPECT_EQ(message([&] { forge::gpt2::GreedyDecoder(m, one, 999, 1); }),
            "gpt2::GreedyDecoder: token id 999 at index 0 " + tail);
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = 2;
  EXPECT_EQ(message([&] {
              forge::gpt2::generate(m, Ids{7, 4096}, o);
            }),
            "generate: prompt: token id 4096 at index 1 " + tail);
}

/// Greedy continuation by full forward passes over the whole sequence (no KV cache).
Ids greedy_reference(const forge::gpt2::Model& m, Ids seq, int n) {
  Ids out;
  for (int i = 0; i < n; ++i) {
    const int64_t T = static_cast<int64_t>(seq.size());
    const std::vector<float> all =
        m.forward(forge::Tensor::from_vector(seq, {1, T})).to_vector<float>();
    const int64_t V = m.config().vocab_size;
    const std::vector<float> last(all.end() - V, all.end());
    out.push_back(loop_argmax(last));
    seq.push_back(out.back());
  }
  return out;
}

// On a model whose greedy continuation changes token (a random tiny GPT-2's sticks to one,
// which a decoder that ignores its cache or its position would reproduce): HF's golden
// "untied" model (tests/data/golden, made by tools/make_golden.py) and its first prompt,
// whose greedy tokens by HF transformers are in the same file.
TEST(Generate, GreedyEqualsFullForwardArgmax) {
  const std::string dir = std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/untied";
  const forge::gpt2::Model m = forge::gpt2::Model::load(dir);
  const nlohmann::json golden =
      nlohmann::json::parse(std::ifstream(dir + "/golden.json"), nullptr, true);
  const Ids prompt = golden.at("greedy").at(0).at("prompt").get<Ids>();
  const Ids hf = golden.at("greedy").at(0).at("tokens").get<Ids>();
  constexpr int kTokens = 20;
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = kTokens;
  o.sampling.greedy = true;
  const auto r = forge::gpt2::generate(m, prompt, o);
  EXPECT_EQ(r.ids, greedy_reference(m, prompt, kTokens));
  EXPECT_EQ(r.ids, Ids(hf.begin(), hf.begin() + kTokens)) << "HF transformers' greedy tokens";
  EXPECT_GE(std::set<uint32_t>(r.ids.begin(), r.ids.end()).size(), 8u)
      << "the continuation must vary for the comparison to mean anything";
  EXPECT_EQ(r.stop_reason, "length");
  EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(r.decode_steps, kTokens - 1);
  EXPECT_TRUE(r.text.empty());
}

TEST(Generate, SeededSamplingIsReproducibleAndStreams) {
  const auto m = tiny_model(-1);
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = 30;
  o.sampling = params(1.0f, 0, 1.0f, 1.1f, 1234);
  Ids streamed;
  const auto a = forge::gpt2::generate(m, Ids{1, 2, 3}, o, nullptr, [&](uint32_t id) {
    streamed.push_back(id);
    return true;
  });
  const auto b = forge::gpt2::generate(m, Ids{1, 2, 3}, o);
  EXPECT_EQ(a.ids.size(), 30u);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(streamed, a.ids);
  o.sampling.seed = 1235;
  EXPECT_NE(forge::gpt2::generate(m, Ids{1, 2, 3}, o).ids, a.ids);
}

TEST(Generate, StopsAtEosAndAtTheCallback) {
  // Seeded sampling (a random tiny model's greedy output sticks to one token): the draws do
  // not depend on eos_id, nor do the weights, so the run with an EOS id is a prefix of the
  // free one.
  const Ids prompt = {7, 8, 9};
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = 10;
  o.sampling = params(1.0f, 0, 1.0f, 1.0f, 77);
  const Ids free = forge::gpt2::generate(tiny_model(-1), prompt, o).ids;
  ASSERT_EQ(free.size(), 10u);
  // EOS := a token that does not occur before its position.
  size_t at = 1;
  while (at < free.size() && std::find(free.begin(), free.begin() + static_cast<long>(at),
                                       free[at]) != free.begin() + static_cast<long>(at))
    ++at;
  ASSERT_LT(at, free.size());
  auto r = forge::gpt2::generate(tiny_model(free[at]), prompt, o);
  EXPECT_EQ(r.ids, Ids(free.begin(), free.begin() + static_cast<long>(at + 1)));
  EXPECT_EQ(r.stop_reason, "eos");
  o.stop_at_eos = false;
  EXPECT_EQ(forge::gpt2::generate(tiny_model(free[at]), prompt, o).ids, free);
  int calls = 0;
  r = forge::gpt2::generate(tiny_model(-1), prompt, o, nullptr,
                            [&](uint32_t) { return ++calls < 2; });
  EXPECT_EQ(r.ids.size(), 2u);
  EXPECT_EQ(r.stop_reason, "callback");
}

TEST(Generate, ContextEndAndTruncation) {
  const auto m = tiny_model(-1);  // n_ctx = 64
  forge::gpt2::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = 100;
  Ids prompt(60, 5);
  // 60 prompt tokens + 5 new ones use 64 positions: the 5th is sampled at position 63.
  auto r = forge::gpt2::generate(m, prompt, o);
  EXPECT_EQ(r.ids.size(), 5u);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_EQ(r.ids, greedy_reference(m, prompt, 5));
  // A prompt over the context: an error, or with truncate its last tokens.
  Ids longp(70);
  for (size_t i = 0; i < longp.size(); ++i) longp[i] = static_cast<uint32_t>(i);
  EXPECT_THROW(forge::gpt2::generate(m, longp, o), Error);
  o.truncate = true;
  o.max_new_tokens = 10;  // room for 10 new tokens: keep 64 + 1 - 10 = 55 prompt tokens
  r = forge::gpt2::generate(m, longp, o);
  EXPECT_EQ(r.prompt_tokens, 55);
  EXPECT_EQ(r.truncated_tokens, 15);
  EXPECT_EQ(r.ids, greedy_reference(m, Ids(longp.begin() + 15, longp.end()), 10));
  EXPECT_EQ(r.stop_reason, "length");
}

TEST(Generate, BadInputsThrow) {
  const auto m = tiny_model();
  forge::gpt2::GenerateOptions o;
  EXPECT_THROW(forge::gpt2::generate(m, Ids{}, o), Error);
  EXPECT_THROW(forge::gpt2::generate(m, Ids{1, 256}, o), Error);  // vocab 256
  o.max_new_tokens = -1;
  EXPECT_THROW(forge::gpt2::generate(m, Ids{1}, o), Error);
  o.max_new_tokens = 3;
  o.stop = {"x"};  // no tokenizer
  EXPECT_THROW(forge::gpt2::generate(m, Ids{1}, o), Error);
  o.stop = {};
  o.sampling.top_p = 0.0f;
  try {
    forge::gpt2::generate(m, Ids{1}, o);
    ADD_FAILURE() << "accepted top_p = 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-p"), std::string::npos) << e.what();
  }
}

}  // namespace
