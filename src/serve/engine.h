// forge serve's decoding engine: continuous batching over a fixed set of slots.
//
// A request handler submits a Job (a prompt and its settings); the engine's one thread owns
// the model's batched KV cache, with one row per slot. Between decode steps, queued jobs
// take free slots (their prompts are prefilled into their rows) and finished or cancelled
// ones leave; every step decodes all busy slots together (Model::decode), each sequence at
// its own position. On the CPU a sequence gets the same bits in a batch of up to 8 as alone
// (tests/test_gpt2_batch_decode.cpp), so a slot's tokens are those `forge generate` gives.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/sampling.h"
#include "forge/tokenizer.h"

namespace forge::serve {

/// One generated token, as a job streams it.
struct TokenEvent {
  bool token = true;  // false: no new token, only text held back until the job ended
  uint32_t id = 0;
  std::string text;  // the text that became final with this token (may be empty)
  std::optional<TokenLogprobs> logprobs;
};

/// A sequence being generated: made by Engine::submit, filled by the engine's thread, read
/// by the request handler. Thread-safe.
class Job {
 public:
  Job(const gpt2::Config& config, std::span<const uint32_t> prompt,
      const gpt2::GenerateOptions& options, const Tokenizer* tokenizer, int logprobs);

  /// Waits up to `timeout` for new events and appends them to `out`. Returns true once the
  /// job has finished and every event has been taken.
  bool wait(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout);
  /// Waits for the end; returns every event not taken before.
  std::vector<TokenEvent> wait_all();
  /// Asks the engine to drop the job at its next step (a queued job never starts); it then
  /// finishes with stop_reason "cancelled".
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  /// After the end: the prompt tokens used, the generated ids and text, and the stop reason
  /// ("length", "eos", "stop", "context" or "cancelled"); error() is non-empty when the
  /// model failed (then the result holds what came before).
  gpt2::GenerateResult result() const;
  std::string error() const;
  /// Seconds from submit to the first token (-1 before it).
  double seconds_to_first_token() const;

 private:
  friend class Engine;
  // The engine thread's side. Samples from `logits` ([V]), takes the token and streams it;
  // returns whether that ended the sequence and the token.
  std::pair<bool, uint32_t> advance(std::span<const float> logits);
  // Ends the job: with `reason` when it has not ended by itself, and `error` when the model
  // failed.
  void finish(const std::string& reason, const std::string& error = "");
  bool ended() const;

  gpt2::Generation gen_;  // under mu_: the engine thread writes it, handlers read it
  int logprobs_;
  std::chrono::steady_clock::time_point submitted_ = std::chrono::steady_clock::now();
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenEvent> events_;
  bool finished_ = false;
  std::string error_;
  double ttft_ = -1;
};

struct EngineOptions {
  int parallel = 1;    // slots: sequences decoded together (rows of the KV cache)
  int max_queue = 64;  // jobs waiting for a slot; submit() refuses more
};

/// Counters for /metrics, read together.
struct EngineStats {
  int64_t slots = 0, slots_busy = 0, queue_depth = 0;
  int64_t jobs_done = 0, prompt_tokens = 0, generated_tokens = 0;
  /// decode_steps[k]: decode steps that ran k sequences together (index 0 unused).
  std::vector<int64_t> decode_steps;
  double ttft_seconds_sum = 0;  // over jobs that produced a token
  int64_t ttft_count = 0;
  double tokens_per_second = 0;  // generated tokens over the last 10 s
};

class Engine {
 public:
  /// Starts the decode thread. `model` and `tokenizer` (may be null) must outlive the
  /// engine. Error(Range) for parallel < 1 or max_queue < 0.
  Engine(const gpt2::Model& model, const Tokenizer* tokenizer, const EngineOptions& options);
  /// Cancels whatever is queued or running, then joins the thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a sequence. Throws forge::Error for what generate() refuses (a prompt longer
  /// than the context, bad ids or settings). Returns null when the queue is full or the
  /// engine is draining.
  std::shared_ptr<Job> submit(std::span<const uint32_t> prompt,
                              const gpt2::GenerateOptions& options, int logprobs = -1);
  /// Stops taking jobs, lets the queued and running ones finish, and joins the thread.
  void drain();

  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }

 private:
  struct Slot {
    std::shared_ptr<Job> job;
    uint32_t next = 0;  // the token the next decode step feeds
  };
  void loop();
  void join(int row);  // prefill the slot's prompt, take its first token
  void step();         // one decode step over the busy slots
  // Samples from `logits` ([V]), streams the token, and frees the slot if that ended it.
  void take(int row, std::span<const float> logits);
  void release(int row, const std::string& error = "");

  const gpt2::Model& model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  gpt2::KVCache cache_;
  std::vector<Slot> slots_;  // the engine thread's

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int busy_ = 0;
  bool stopping_ = false, abort_ = false;
  EngineStats stats_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;  // tokens/s
  std::thread thread_;
};

}  // namespace forge::serve
