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

/// Tracks the generated text, finds stop strings in it, and decides how much of it is final:
/// everything but a trailing part that could still grow into a stop string.
class StopText {
 public:
  explicit StopText(const std::vector<std::string>& stop) : stop_(stop) {
    for (const std::string& s : stop_) longest_ = std::max(longest_, s.size());
  }

  /// Appends text; returns true when a stop string now appears (the text is then cut
  /// before its first occurrence).
  bool append(const std::string& piece) {
    text_ += piece;
    if (stop_.empty() || piece.empty()) return false;
    // Only a match that overlaps the new piece can be new.
    const size_t from =
        text_.size() - piece.size() >= longest_ ? text_.size() - piece.size() - longest_ + 1 : 0;
    size_t cut = std::string::npos;
    for (const std::string& s : stop_) cut = std::min(cut, text_.find(s, from));
    if (cut == std::string::npos) return false;
    text_.resize(cut);
    return true;
  }

  /// Bytes of text that no later token can turn into part of a stop string.
  size_t final_size() const {
    size_t hold = 0;
    for (const std::string& s : stop_)
      for (size_t n = std::min(s.size() - 1, text_.size()); n > hold; --n)
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    return text_.size() - hold;
  }

  const std::string& text() const { return text_; }

 private:
  const std::vector<std::string>& stop_;
  size_t longest_ = 0;
  std::string text_;
};

}  // namespace

GenerateResult generate(const Model& model, std::span<const uint32_t> prompt_in,
                        const GenerateOptions& o, const Tokenizer* tokenizer,
                        const TokenCallback& on_token, const TextCallback& on_text) {
  const Config& c = model.config();
  if (o.max_new_tokens < 0)
    fail(ErrorKind::Range, "max_new_tokens must be >= 0, got " + std::to_string(o.max_new_tokens));
  o.sampling.validate();
  if (!o.stop.empty() && !tokenizer)
    fail(ErrorKind::Format, "stop strings need a tokenizer (the model folder has none)");
  for (const std::string& s : o.stop)
    if (s.empty()) fail(ErrorKind::Format, "a stop string is empty");
  if (prompt_in.empty()) fail(ErrorKind::Range, "the prompt holds no tokens");
  c.check_token_ids(prompt_in.data(), prompt_in.size(), "generate: prompt");

  // P prompt tokens + N new ones use P + N - 1 positions (the last token is never fed back).
  const int64_t n_ctx = c.n_ctx;
  int64_t P = static_cast<int64_t>(prompt_in.size());
  GenerateResult r;
  if (P > n_ctx && !o.truncate)
    fail(ErrorKind::Range, "the prompt has " + std::to_string(P) +
                               " tokens, more than the model's context of " +
                               std::to_string(n_ctx) + " (truncate it to keep its last tokens)");
  if (o.truncate) {
    const int64_t room = n_ctx + 1 - o.max_new_tokens;
    const int64_t keep = std::clamp(room, std::max<int64_t>(1, n_ctx / 2), n_ctx);
    if (P > keep) {
      r.truncated_tokens = P - keep;
      P = keep;
    }
  }
  const std::span<const uint32_t> prompt =
      prompt_in.subspan(static_cast<size_t>(r.truncated_tokens));
  r.prompt_tokens = P;
  if (o.max_new_tokens == 0) {
    r.stop_reason = "length";
    return r;
  }

  Sampler sampler(o.sampling);
  KVCache cache(model, 1, std::min(n_ctx, P + o.max_new_tokens - 1));
  std::vector<uint32_t> context(prompt.begin(), prompt.end());  // for the repetition penalty
  context.reserve(static_cast<size_t>(P + o.max_new_tokens));
  const int64_t eos = o.stop_at_eos ? c.eos_id : -1;
  std::optional<StreamDecoder> decoder;
  if (tokenizer) decoder.emplace(*tokenizer);
  StopText text(o.stop);
  size_t emitted = 0;
  auto emit = [&](size_t upto) {
    if (upto > emitted && on_text)
      on_text(std::string_view(text.text()).substr(emitted, upto - emitted));
    emitted = std::max(emitted, upto);
  };

  // Greedy without a repetition penalty takes the argmax on the model's device (the same id
  // as the sampler's; a GPU reads back 4 bytes, not the logits), and its decode steps run
  // through a GreedyDecoder (on a GPU the device feeds each token to the next step itself);
  // the rest samples on the host.
  const bool device_argmax = o.sampling.is_greedy() && o.sampling.repeat_penalty == 1.0f;
  std::optional<GreedyDecoder> greedy;
  auto t0 = Clock::now();
  Tensor logits = model.forward_cached(Tensor::from_vector(context, {1, P}), cache);
  for (;;) {
    uint32_t id = 0;
    if (greedy)  // made after the first id, from the prefill's logits
      id = greedy->next();
    else if (device_argmax)
      id = read_async(forge::argmax_rows(logits)).get<uint32_t>()[0];
    else
      id = sampler.sample(read_async(logits).get<float>(), context);
    check_mapped_files();  // no token computed from a weights file that shrank under us
    if (r.ids.empty())
      r.prefill_seconds = seconds_since(t0);
    else
      r.decode_seconds += seconds_since(t0);
    r.ids.push_back(id);
    context.push_back(id);

    if (static_cast<int64_t>(id) == eos) {
      if (on_token) on_token(id);
      r.stop_reason = "eos";
      break;
    }
    if (decoder && text.append(decoder->push(id))) {
      emit(text.text().size());
      if (on_token) on_token(id);
      r.stop_reason = "stop";
      break;
    }
    emit(text.final_size());
    if (on_token && !on_token(id)) {
      r.stop_reason = "callback";
      break;
    }
    if (static_cast<int64_t>(r.ids.size()) == o.max_new_tokens) {
      r.stop_reason = "length";
      break;
    }
    if (cache.length() == n_ctx) {
      r.stop_reason = "context";
      break;
    }
    t0 = Clock::now();
    if (device_argmax && !greedy)  // every step the cache has room for (see its capacity)
      greedy.emplace(model, cache, id, cache.capacity() - cache.length());
    if (!greedy)
      logits = model.forward_cached(Tensor::from_vector(std::vector<uint32_t>{id}, {1, 1}), cache);
    ++r.decode_steps;
  }
  // Whatever was held back is final now: an incomplete UTF-8 tail, or the start of a stop
  // string that never completed.
  if (decoder && r.stop_reason != "stop") text.append(decoder->flush());
  emit(text.text().size());
  r.text = text.text();
  return r;
}

}  // namespace forge::gpt2
