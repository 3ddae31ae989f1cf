// Greedy decoding with the next token chosen and fed back on the device (GreedyDecoder).
//
// On a GPU, a step is the cache's greedy step (replayed where the device can, recorded again
// by each run elsewhere): the decode step, then the argmax of its logits written over its
// own input token. The host writes only the position before each run and reads the chosen
// token back without waiting for the steps queued after it (read_async), so next() queues
// step n + 1 and then waits for step n: the device goes from one step to the next while the
// host handles the token.
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "models/gpt2/decode_graph.h"

namespace forge::gpt2 {
namespace {

constexpr const char* kFn = "gpt2::GreedyDecoder";
// Steps queued on the device at once: the one whose token next() waits for and the one
// after it.
constexpr int64_t kAhead = 2;

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(kFn) + ": " + what);
}

}  // namespace

GreedyDecoder::GreedyDecoder(const Model& model, KVCache& cache, uint32_t token, int64_t max_steps)
    : model_(model),
      cache_(cache),
      token_(token),
      start_(cache.lengths_[0]),
      max_steps_(max_steps) {
  const Config& c = model.config();
  model.check_cache(cache, kFn);
  if (cache.batch_ != 1)
    fail(ErrorKind::Shape,
         "decodes one sequence; the KV cache holds " + std::to_string(cache.batch_));
  c.check_token_ids(&token, 1, kFn);
  if (max_steps < 0 || max_steps > cache.capacity_ - start_)
    fail(ErrorKind::Range, std::to_string(max_steps) + " steps after " + std::to_string(start_) +
                               " cached positions: the cache has room for " +
                               std::to_string(cache.capacity_ - start_));
  // On a GPU the steps go ahead of the host even where they are not replayed (WebGPU: run()
  // records the step's ops again), so the host records step n + 1 while the device runs
  // step n; the step's attention reads its position on the device (attention_at).
  const Device d = model.device();
  if (max_steps > 0 && (RecordedStep::replays_on(d) ||
                        (!d.is_cpu() && device_runs_op(d, Op::attention_at))))
    graph_ = model.decode_graph(cache, /*greedy=*/true);
}

// Tokens of steps queued past the last one returned are read and dropped with their
// PendingReads (their positions stay outside the cache's length).
GreedyDecoder::~GreedyDecoder() = default;

void GreedyDecoder::queue() {
  const auto pos = static_cast<uint32_t>(start_ + queued_);
  if (queued_ == 0)
    graph_->step.copy_from(std::vector<uint32_t>{token_, pos});
  else  // the token is the one the step before chose, already in place
    graph_->step.narrow_rows(1, 1).copy_from(std::vector<uint32_t>{pos});
  graph_->run->run();
  tokens_.push_back(read_async(graph_->step.narrow_rows(0, 1)));
  ++queued_;
}

uint32_t GreedyDecoder::next() {
  if (done_ == max_steps_)
    fail(ErrorKind::Range, "all " + std::to_string(max_steps_) + " steps are done");
  const auto t0 = std::chrono::steady_clock::now();
  const auto host_done = [&] {
    host_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (!graph_) {
    const Tensor logits =
        model_.forward_cached(Tensor::from_vector(std::vector<uint32_t>{token_}, {1, 1}), cache_);
    const Tensor picked = argmax_rows(logits);
    host_done();
    token_ = read_async(picked).get<uint32_t>()[0];
    ++done_;
    return token_;
  }
  while (queued_ < max_steps_ && queued_ - done_ < kAhead) queue();
  host_done();
  const uint32_t id = tokens_.front().get<uint32_t>()[0];
  tokens_.pop_front();
  ++done_;
  cache_.lengths_[0] = start_ + done_;
  return id;
}

}  // namespace forge::gpt2
