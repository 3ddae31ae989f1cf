// Next-token sampling: repetition penalty, temperature, top-k, top-p (nucleus), and a
// seeded draw that gives the same tokens on every run and every machine.
//
// The order is the one users of HF transformers / llama.cpp expect:
//   1. repetition penalty (HF): for each distinct id in the context, a logit > 0 is divided
//      by R, any other logit multiplied by R; then OpenAI's frequency and presence
//      penalties over the generated ids only: logit -= count * frequency + presence for
//      each id generated count > 0 times;
//   2. temperature: logits / T (T = 0, or `greedy`, means argmax: steps 3-5 are skipped);
//   3. top-k: keep the k largest logits (k = 0: all);
//   4. top-p: over the softmax of what is left, sorted by probability, keep the smallest
//      prefix whose cumulative probability is >= p (always at least one token; p = 1: all);
//   5. draw from the renormalized distribution with a uniform double from std::mt19937_64.
// Ties are broken towards the smaller id everywhere, so results never depend on the
// standard library's sort. Every function throws forge::Error (Range) for invalid
// parameters, empty logits, or context ids outside the logits; messages start with
// "sampling: ".
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace forge {

struct SamplingParams {
  bool greedy = false;             // argmax, ignores the other settings but the penalty
  float temperature = 1.0f;        // >= 0; 0 = greedy
  int64_t top_k = 0;               // >= 0; 0 = no limit
  float top_p = 1.0f;              // in (0, 1]; 1 = no limit
  float repeat_penalty = 1.0f;     // > 0; 1 = none
  float frequency_penalty = 0.0f;  // in [-2, 2] (OpenAI's range); 0 = none
  float presence_penalty = 0.0f;   // in [-2, 2]; 0 = none
  uint64_t seed = 0;               // the RNG seed of a Sampler

  /// Error(Range) "sampling: ..." naming the first invalid field (NaN included).
  void validate() const;
  /// True when no randomness is involved (greedy or temperature 0).
  bool is_greedy() const { return greedy || temperature == 0.0f; }
  /// True when a penalty changes the logits (so a device-side argmax of the raw logits is
  /// not the sampler's pick).
  bool has_penalty() const {
    return repeat_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
};

/// HF's repetition penalty applied in place to `logits` over the distinct ids of `context`.
/// Error(Range) if penalty <= 0 or an id >= logits.size().
void apply_repetition_penalty(std::span<float> logits, std::span<const uint32_t> context,
                              float penalty);

/// OpenAI's frequency and presence penalties applied in place to `logits` over `generated`
/// (each distinct id once: logit -= count * frequency + presence). Error(Range) if either is
/// outside [-2, 2] or an id >= logits.size().
void apply_frequency_penalties(std::span<float> logits, std::span<const uint32_t> generated,
                               float frequency, float presence);

/// The log-probability of `id` under softmax(logits) (the model's own distribution, before
/// any sampling setting), and the `top` most likely ids with theirs (by decreasing
/// probability, then increasing id). Error(Range) for empty logits, id >= logits.size() or
/// top < 0.
struct TokenLogprobs {
  uint32_t id = 0;
  double logprob = 0.0;
  std::vector<std::pair<uint32_t, double>> top;
};
TokenLogprobs token_logprobs(std::span<const float> logits, uint32_t id, int top);

/// Index of the largest logit (the smallest such index on ties; NaN never wins unless every
/// logit is NaN). Error(Range) for empty logits.
uint32_t argmax(std::span<const float> logits);

/// The distribution steps 1-4 leave: (id, probability) pairs sorted by decreasing
/// probability (then increasing id), probabilities summing to 1. For a greedy setting it is
/// the single argmax with probability 1. Exposed for tests and for tools that want to show
/// the candidates.
std::vector<std::pair<uint32_t, double>> candidate_distribution(std::span<const float> logits,
                                                                std::span<const uint32_t> context,
                                                                const SamplingParams& params);

/// A seeded sampler: the same params (seed included) and the same sequence of calls give the
/// same ids on every run and machine.
class Sampler {
 public:
  /// Validates `params` (Error(Range)).
  explicit Sampler(const SamplingParams& params);

  /// Picks the next id from `logits` ([V]) given the ids seen so far (prompt + generated,
  /// for the repetition penalty) and the generated ones alone (for the frequency and
  /// presence penalties). Error(Range) for empty logits or ids >= V.
  uint32_t sample(std::span<const float> logits, std::span<const uint32_t> context,
                  std::span<const uint32_t> generated = {});

  /// A uniform double in [0, 1) from the sampler's generator (53 random bits).
  double uniform();

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;  // the penalized logits, reused between calls
};

}  // namespace forge
