// Text generation with a GPT-2 model: prefill the prompt into a KV cache, then decode one
// token at a time with a Sampler, streaming each token (and its text) to a callback.
//
// Stops at the first of: max_new_tokens generated; the EOS id (config.eos_id, when
// stop_at_eos and the model has one; the EOS token is kept in the ids but adds no text);
// a stop string appearing in the generated text (the text is cut before it; the ids keep
// the token that completed it); the end of the context (n_ctx positions: the last token
// is sampled from the logits at position n_ctx - 1; result.stop_reason = "context").
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "forge/gpt2.h"
#include "forge/sampling.h"
#include "forge/tokenizer.h"

namespace forge::gpt2 {

struct GenerateOptions {
  int64_t max_new_tokens = 64;  // >= 0
  SamplingParams sampling;
  bool stop_at_eos = true;
  /// Stop when the generated text contains one of these (non-empty) strings. Needs a
  /// tokenizer.
  std::vector<std::string> stop;
  /// A prompt longer than the context: false → Error(Range); true → keep its last tokens,
  /// as many as leave room for max_new_tokens but never fewer than n_ctx / 2 (nor more than
  /// n_ctx).
  bool truncate = false;
};

struct GenerateResult {
  std::vector<uint32_t> ids;     // generated ids only (not the prompt)
  std::string text;              // their text (empty without a tokenizer), cut before a stop string
  int64_t prompt_tokens = 0;     // prompt tokens actually used (after truncation)
  int64_t truncated_tokens = 0;  // prompt tokens dropped by `truncate`
  std::string stop_reason;       // "length", "eos", "stop", "context", or "callback"
  double prefill_seconds = 0.0;  // the prompt's forward pass (its first sample included)
  double decode_seconds = 0.0;   // every later step (forward of 1 token + sample)
  int64_t decode_steps = 0;      // forward passes of 1 token
};

/// Called once per generated token, in order; return false to stop generating
/// (stop_reason "callback").
using TokenCallback = std::function<bool(uint32_t id)>;
/// Called with each piece of generated text as soon as it is final: UTF-8 characters split
/// across tokens, and text that might be the start of a stop string, are held back until
/// resolved. The pieces concatenate to result.text.
using TextCallback = std::function<void(std::string_view text)>;

/// Generates from `prompt` (>= 1 ids, each < vocab_size). `tokenizer` may be null (then no
/// text, and `stop` must be empty). Errors (forge::Error, message "generate: ..."): empty
/// prompt, ids out of range, a prompt longer than n_ctx without `truncate` (Range), invalid
/// sampling settings, max_new_tokens < 0, an empty stop string or stop strings without a
/// tokenizer (Format); errors of the model's forward pass pass through.
GenerateResult generate(const Model& model, std::span<const uint32_t> prompt,
                        const GenerateOptions& options, const Tokenizer* tokenizer = nullptr,
                        const TokenCallback& on_token = {}, const TextCallback& on_text = {});

}  // namespace forge::gpt2
