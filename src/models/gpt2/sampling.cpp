// Next-token sampling (see include/forge/sampling.h for the order of the steps).
//
// Candidates are ordered by (logit desc, id asc): a strict total order, so that nth_element
// and partial_sort select the same set and the same order with every standard library, and
// the draw, which scans candidates in that order, is reproducible everywhere.
#include "forge/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "forge/error.h"

namespace forge {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::Range, "sampling: " + what);
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

struct Cand {
  float logit;
  uint32_t id;
};

bool before(const Cand& a, const Cand& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// NaN would break the strict order (and means nothing as a score): it ranks lowest.
float sane(float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; }

void check_logits(std::span<const float> logits) {
  if (logits.empty()) fail("logits are empty");
  if (logits.size() > std::numeric_limits<uint32_t>::max())
    fail("more logits (" + std::to_string(logits.size()) + ") than 32-bit ids can name");
}

void check_context(std::span<const uint32_t> context, size_t vocab) {
  for (size_t i = 0; i < context.size(); ++i)
    if (context[i] >= vocab)
      fail("context id " + std::to_string(context[i]) + " at position " + std::to_string(i) +
           " is outside the logits (size " + std::to_string(vocab) + ")");
}

/// Steps 1-4 on a penalized copy of the logits: fills `cands` with the kept candidates,
/// sorted by before(), and `weights` with their unnormalized probabilities; returns the sum
/// of the weights. `sorted_needed` false lets the no-top-p case skip the O(V log V) sort
/// (the draw then scans candidates in id order, which is just as deterministic).
double build_candidates(std::span<const float> logits, const SamplingParams& p, bool sorted_needed,
                        std::vector<Cand>& cands, std::vector<double>& weights) {
  const size_t V = logits.size();
  cands.resize(V);
  for (size_t i = 0; i < V; ++i) cands[i] = {sane(logits[i]), static_cast<uint32_t>(i)};

  // top-k (on logits: temperature > 0 does not change their order).
  if (p.top_k > 0 && static_cast<uint64_t>(p.top_k) < V) {
    const auto kth = cands.begin() + p.top_k;
    std::nth_element(cands.begin(), kth - 1, cands.end(), before);
    cands.resize(static_cast<size_t>(p.top_k));
  }

  float mx = -std::numeric_limits<float>::infinity();
  for (const Cand& c : cands) mx = std::max(mx, c.logit);
  // softmax(l / T) with the max subtracted first. A non-finite max (+inf, or every logit
  // -inf/NaN) would give inf - inf: the tokens at the max then share the probability.
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  auto weight = [&](float l) {
    if (!std::isfinite(mx)) return l == mx ? 1.0 : 0.0;
    return std::exp((static_cast<double>(l) - static_cast<double>(mx)) * inv_t);
  };

  const bool nucleus = p.top_p < 1.0f;
  if (!nucleus && !sorted_needed) {
    weights.resize(cands.size());
    double total = 0;
    for (size_t i = 0; i < cands.size(); ++i) total += weights[i] = weight(cands[i].logit);
    return total;
  }

  double total = 0;
  for (const Cand& c : cands) total += weight(c.logit);
  // Sort only as long a prefix as top-p needs: the 256 most likely first (usually enough);
  // if not, the rest with one std::sort (growing a heap-based partial_sort is far slower).
  const double target = nucleus ? static_cast<double>(p.top_p) * total : total;
  size_t sorted = 0, keep = cands.size();
  double cum = 0;
  weights.clear();
  for (size_t want = std::min<size_t>(cands.size(), 256);; want = cands.size()) {
    const auto from = cands.begin() + static_cast<std::ptrdiff_t>(sorted);
    if (want == cands.size())
      std::sort(from, cands.end(), before);  // partial_sort to the end is a slow heapsort
    else
      std::partial_sort(from, cands.begin() + static_cast<std::ptrdiff_t>(want), cands.end(),
                        before);
    bool done = false;
    for (; sorted < want; ++sorted) {
      const double w = weight(cands[sorted].logit);
      weights.push_back(w);
      cum += w;
      if (nucleus && cum >= target) {
        keep = sorted + 1;
        done = true;
        break;
      }
    }
    if (done || want == cands.size()) break;
  }
  // Rounding may leave cum a hair below p * total after the last candidate: keep them all.
  keep = std::min(keep, weights.size());
  cands.resize(keep);
  weights.resize(keep);
  double kept = 0;
  for (double w : weights) kept += w;
  return kept;
}

}  // namespace

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    fail("temperature must be a finite number >= 0, got " + num(temperature));
  if (top_k < 0) fail("top-k must be >= 0 (0: no limit), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top-p must be in (0, 1], got " + num(top_p));
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    fail("repeat-penalty must be a finite number > 0 (1: none), got " + num(repeat_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    fail("frequency-penalty must be in [-2, 2], got " + num(frequency_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    fail("presence-penalty must be in [-2, 2], got " + num(presence_penalty));
}

void apply_repetition_penalty(std::span<float> logits, std::span<const uint32_t> context,
                              float penalty) {
  if (!(penalty > 0.0f) || !std::isfinite(penalty))
    fail("repeat-penalty must be a finite number > 0, got " + num(penalty));
  check_context(context, logits.size());
  if (penalty == 1.0f) return;
  // Each distinct id is penalized once, however often it occurs (as HF's gather/scatter).
  std::vector<uint32_t> ids(context.begin(), context.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (uint32_t id : ids) {
    float& l = logits[id];
    l = l > 0.0f ? l / penalty : l * penalty;
  }
}

void apply_frequency_penalties(std::span<float> logits, std::span<const uint32_t> generated,
                               float frequency, float presence) {
  if (!(frequency >= -2.0f && frequency <= 2.0f) || !(presence >= -2.0f && presence <= 2.0f))
    fail("frequency and presence penalties must be in [-2, 2], got " + num(frequency) + " and " +
         num(presence));
  check_context(generated, logits.size());
  if (frequency == 0.0f && presence == 0.0f) return;
  std::vector<uint32_t> ids(generated.begin(), generated.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    logits[ids[i]] -= static_cast<float>(j - i) * frequency + presence;
    i = j;
  }
}

TokenLogprobs token_logprobs(std::span<const float> logits, uint32_t id, int top) {
  check_logits(logits);
  if (id >= logits.size())
    fail("id " + std::to_string(id) + " is outside the logits (size " +
         std::to_string(logits.size()) + ")");
  if (top < 0) fail("the number of top log-probabilities must be >= 0, got " + std::to_string(top));
  // log softmax in double: l - max - log(sum exp(l - max)).
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits) mx = std::max(mx, static_cast<double>(sane(l)));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(sane(l)) - mx);
  const double log_z = mx + std::log(sum);
  TokenLogprobs r;
  r.id = id;
  r.logprob = static_cast<double>(sane(logits[id])) - log_z;
  const size_t n = std::min(static_cast<size_t>(top), logits.size());
  if (n == 0) return r;
  std::vector<Cand> cands(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cands[i] = {sane(logits[i]), static_cast<uint32_t>(i)};
  std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(n), cands.end(),
                    before);
  for (size_t i = 0; i < n; ++i)
    r.top.emplace_back(cands[i].id, static_cast<double>(cands[i].logit) - log_z);
  return r;
}

uint32_t argmax(std::span<const float> logits) {
  check_logits(logits);
  size_t best = 0;
  float best_v = sane(logits[0]);
  for (size_t i = 1; i < logits.size(); ++i) {
    const float v = sane(logits[i]);
    if (v > best_v) {
      best_v = v;
      best = i;
    }
  }
  return static_cast<uint32_t>(best);
}

std::vector<std::pair<uint32_t, double>> candidate_distribution(std::span<const float> logits,
                                                                std::span<const uint32_t> context,
                                                                const SamplingParams& params) {
  params.validate();
  check_logits(logits);
  check_context(context, logits.size());
  std::vector<float> l(logits.begin(), logits.end());
  apply_repetition_penalty(l, context, params.repeat_penalty);
  if (params.is_greedy()) return {{argmax(l), 1.0}};
  std::vector<Cand> cands;
  std::vector<double> weights;
  const double total = build_candidates(l, params, true, cands, weights);
  std::vector<std::pair<uint32_t, double>> out(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) out[i] = {cands[i].id, weights[i] / total};
  return out;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  params_.validate();
}

double Sampler::uniform() {
  // The top 53 bits of mt19937_64's output (fixed by the standard) as a double in [0, 1):
  // std::uniform_real_distribution's algorithm is implementation-defined.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

uint32_t Sampler::sample(std::span<const float> logits, std::span<const uint32_t> context,
                         std::span<const uint32_t> generated) {
  check_logits(logits);
  check_context(context, logits.size());
  check_context(generated, logits.size());
  std::span<const float> l = logits;
  const bool repeat = params_.repeat_penalty != 1.0f && !context.empty();
  const bool frequency =
      (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) && !generated.empty();
  if (repeat || frequency) {
    scratch_.assign(logits.begin(), logits.end());
    apply_repetition_penalty(scratch_, context, params_.repeat_penalty);
    apply_frequency_penalties(scratch_, generated, params_.frequency_penalty,
                              params_.presence_penalty);
    l = scratch_;
  }
  if (params_.is_greedy()) return argmax(l);
  std::vector<Cand> cands;
  std::vector<double> weights;
  const double total = build_candidates(l, params_, false, cands, weights);
  const double target = uniform() * total;
  double cum = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    cum += weights[i];
    if (cum > target) return cands[i].id;
  }
  // u * total can round up to total; then the last candidate with any weight wins.
  for (size_t i = cands.size(); i-- > 0;)
    if (weights[i] > 0) return cands[i].id;
  return cands.front().id;
}

}  // namespace forge
