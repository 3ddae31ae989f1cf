// Text generation: prefill + KV-cache decode + sampling, with streaming and stop rules.
#include "forge/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "forge/device_queue.h"
#include "forge/error.h"
#include "forge/mapped_files.h"
#include "forge/ops.h"

namespace forge::gpt2 {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "generate: " + what);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Generation::Generation(const Config& c, std::span<const uint32_t> prompt_in,
                       const GenerateOptions& o, const Tokenizer* tokenizer)
    : config_(c), options_(o), sampler_(o.sampling) {
  if (o.max_new_tokens < 0)
    fail(ErrorKind::Range, "max_new_tokens must be >= 0, got " + std::to_string(o.max_new_tokens));
  if (!o.stop.empty() && !tokenizer)
    fail(ErrorKind::Format, "stop strings need a tokenizer (the model folder has none)");
  for (const std::string& s : o.stop) {
    if (s.empty()) fail(ErrorKind::Format, "a stop string is empty");
    longest_stop_ = std::max(longest_stop_, s.size());
  }
  if (prompt_in.empty()) fail(ErrorKind::Range, "the prompt holds no tokens");
  c.check_token_ids(prompt_in.data(), prompt_in.size(), "generate: prompt");

  // P prompt tokens + N new ones use P + N - 1 positions (the last token is never fed back).
  const int64_t n_ctx = c.n_ctx;
  int64_t P = static_cast<int64_t>(prompt_in.size());
  if (P > n_ctx && !o.truncate)
    fail(ErrorKind::Range, "the prompt has " + std::to_string(P) +
                               " tokens, more than the model's context of " +
                               std::to_string(n_ctx) + " (truncate it to keep its last tokens)");
  if (o.truncate) {
    const int64_t room = n_ctx + 1 - o.max_new_tokens;
    const int64_t keep = std::clamp(room, std::max<int64_t>(1, n_ctx / 2), n_ctx);
    if (P > keep) {
      result_.truncated_tokens = P - keep;
      P = keep;
    }
  }
  context_.assign(prompt_in.begin() + result_.truncated_tokens, prompt_in.end());
  context_.reserve(static_cast<size_t>(P + o.max_new_tokens));
  prompt_size_ = static_cast<size_t>(P);
  result_.prompt_tokens = P;
  if (tokenizer) decoder_.emplace(*tokenizer);
  if (o.max_new_tokens == 0) result_.stop_reason = "length";
}

std::span<const uint32_t> Generation::prompt() const {
  return std::span<const uint32_t>(context_).first(prompt_size_);
}

int64_t Generation::positions_needed() const {
  return std::min(config_.n_ctx,
                  result_.prompt_tokens + std::max<int64_t>(options_.max_new_tokens, 1) - 1);
}

bool Generation::argmax_is_sample() const {
  return options_.sampling.is_greedy() && !options_.sampling.has_penalty();
}

uint32_t Generation::sample(std::span<const float> logits) {
  return sampler_.sample(logits, context_,
                         std::span<const uint32_t>(context_).subspan(prompt_size_));
}

std::string Generation::take_final(size_t upto) {
  std::string out;
  if (upto > emitted_) out = text_.substr(emitted_, upto - emitted_);
  emitted_ = std::max(emitted_, upto);
  return out;
}

std::string Generation::accept(uint32_t id) {
  if (done())
    fail(ErrorKind::Range, "the sequence has already ended (" + result_.stop_reason + ")");
  config_.check_token_ids(&id, 1, "generate: accepted token");
  result_.ids.push_back(id);
  context_.push_back(id);
  const int64_t eos = options_.stop_at_eos ? config_.eos_id : -1;
  if (static_cast<int64_t>(id) == eos) return stop("eos");

  if (decoder_) {
    const std::string piece = decoder_->push(id);
    text_ += piece;
    if (!options_.stop.empty() && !piece.empty()) {
      // Only a match that overlaps the new piece can be new.
      const size_t from = text_.size() - piece.size() >= longest_stop_
                              ? text_.size() - piece.size() - longest_stop_ + 1
                              : 0;
      size_t cut = std::string::npos;
      for (const std::string& s : options_.stop) cut = std::min(cut, text_.find(s, from));
      if (cut != std::string::npos) {
        text_.resize(cut);
        result_.stop_reason = "stop";
        result_.text = text_;
        return take_final(text_.size());
      }
    }
  }
  if (static_cast<int64_t>(result_.ids.size()) == options_.max_new_tokens) return stop("length");
  // The positions in use: the prompt and every generated token but this one.
  if (result_.prompt_tokens + static_cast<int64_t>(result_.ids.size()) - 1 == config_.n_ctx)
    return stop("context");
  // Hold back a tail that a later token could still turn into a stop string.
  size_t hold = 0;
  for (const std::string& s : options_.stop)
    for (size_t n = std::min(s.size() - 1, text_.size()); n > hold; --n)
      if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  return take_final(text_.size() - hold);
}

std::string Generation::stop(const std::string& reason) {
  if (done()) return {};
  // Whatever was held back is final now: an incomplete UTF-8 tail, or the start of a stop
  // string that never completed.
  if (decoder_) text_ += decoder_->flush();
  result_.stop_reason = reason;
  result_.text = text_;
  return take_final(text_.size());
}

GenerateResult generate(const Model& model, std::span<const uint32_t> prompt_in,
                        const GenerateOptions& o, const Tokenizer* tokenizer,
                        const TokenCallback& on_token, const TextCallback& on_text) {
  Generation g(model.config(), prompt_in, o, tokenizer);
  if (g.done()) return g.result();
  GenerateResult& r = g.result();
  const std::span<const uint32_t> prompt = g.prompt();
  const int64_t P = static_cast<int64_t>(prompt.size());
  KVCache cache(model, 1, g.positions_needed());
  auto emit = [&](const std::string& text) {
    if (!text.empty() && on_text) on_text(text);
  };

  // Greedy without a penalty takes the argmax on the model's device (the same id as the
  // sampler's; a GPU reads back 4 bytes, not the logits), and its decode steps run through a
  // GreedyDecoder (on a GPU the device feeds each token to the next step itself); the rest
  // samples on the host.
  const bool device_argmax = g.argmax_is_sample();
  std::optional<GreedyDecoder> greedy;
  auto t0 = Clock::now();
  Tensor logits = model.forward_cached(
      Tensor::from_vector(std::vector<uint32_t>(prompt.begin(), prompt.end()), {1, P}), cache);
  for (;;) {
    uint32_t id = 0;
    if (greedy)  // made after the first id, from the prefill's logits
      id = greedy->next();
    else if (device_argmax)
      id = read_async(forge::argmax_rows(logits)).get<uint32_t>()[0];
    else
      id = g.sample(read_async(logits).get<float>());
    check_mapped_files();  // no token computed from a weights file that shrank under us
    if (r.ids.empty())
      r.prefill_seconds = seconds_since(t0);
    else
      r.decode_seconds += seconds_since(t0);
    emit(g.accept(id));
    if (on_token && !on_token(id)) emit(g.stop("callback"));
    if (g.done()) break;
    t0 = Clock::now();
    if (device_argmax && !greedy)  // every step the cache has room for (see its capacity)
      greedy.emplace(model, cache, id, cache.capacity() - cache.length());
    if (!greedy)
      logits = model.forward_cached(Tensor::from_vector(std::vector<uint32_t>{id}, {1, 1}), cache);
    ++r.decode_steps;
  }
  return r;
}

}  // namespace forge::gpt2
