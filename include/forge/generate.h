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
#include <optional>
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

/// One sequence being generated, a token at a time: the prompt it keeps (after
/// truncation), its sampler, the stop rules and the text streamed so far. The model's
/// forward passes are the caller's: generate() drives one Generation over a KV cache of its
/// own; a server drives many, each in a row of one batched cache (Model::decode). Every
/// rule above (stop strings, EOS, length, context, UTF-8 held back) lives here, once.
class Generation {
 public:
  /// Validates as generate() does, with its errors ("generate: ..."). `tokenizer` may be
  /// null (no text, no stop strings); it must outlive the Generation.
  Generation(const Config& config, std::span<const uint32_t> prompt, const GenerateOptions& options,
             const Tokenizer* tokenizer);

  /// The prompt ids that are fed to the model (the last ones, after `truncate`).
  std::span<const uint32_t> prompt() const;
  /// Cache positions this sequence can ever use: min(n_ctx, prompt + max_new_tokens - 1).
  int64_t positions_needed() const;
  /// Whether the caller may pick the next id as the argmax of the raw logits (greedy, no
  /// penalty): on a GPU that avoids reading the logits back.
  bool argmax_is_sample() const;

  /// The next id from the logits of the last position ([V], on the host).
  uint32_t sample(std::span<const float> logits);
  /// Takes `id` as the next generated token and returns the text that became final
  /// (possibly empty). When that ends the sequence (EOS, a stop string, max_new_tokens, the
  /// end of the context), done() turns true and the returned text includes whatever was
  /// held back.
  std::string accept(uint32_t id);
  /// Ends the sequence early with `reason` (e.g. "callback"); returns the held-back text,
  /// now final. Does nothing (returns "") when already done.
  std::string stop(const std::string& reason);

  bool done() const { return !result_.stop_reason.empty(); }
  /// The ids and text so far; stop_reason is set once done(). The timing fields are the
  /// caller's to fill.
  GenerateResult& result() { return result_; }
  const GenerateResult& result() const { return result_; }

 private:
  std::string take_final(size_t upto);

  Config config_;
  GenerateOptions options_;
  std::vector<uint32_t> context_;  // prompt (truncated) + generated, for the penalties
  size_t prompt_size_ = 0;
  Sampler sampler_;
  std::optional<StreamDecoder> decoder_;
  std::string text_;    // all generated text, cut before a stop string
  size_t emitted_ = 0;  // bytes of text_ already returned
  size_t longest_stop_ = 0;
  GenerateResult result_;
};

/// Generates from `prompt` (>= 1 ids, each < vocab_size). `tokenizer` may be null (then no
/// text, and `stop` must be empty). Errors (forge::Error, message "generate: ..."): empty
/// prompt, ids out of range, a prompt longer than n_ctx without `truncate` (Range), invalid
/// sampling settings, max_new_tokens < 0, an empty stop string or stop strings without a
/// tokenizer (Format); errors of the model's forward pass pass through.
GenerateResult generate(const Model& model, std::span<const uint32_t> prompt,
                        const GenerateOptions& options, const Tokenizer* tokenizer = nullptr,
                        const TokenCallback& on_token = {}, const TextCallback& on_text = {});

}  // namespace forge::gpt2
