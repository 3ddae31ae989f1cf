// forge serve's continuous-batching engine (engine.h).
#include "serve/engine.h"

#include <algorithm>
#include <exception>

#include "forge/device_queue.h"
#include "forge/error.h"
#include "forge/ops.h"

namespace forge::serve {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// ---- Job -------------------------------------------------------------------------------------

Job::Job(const gpt2::Config& config, std::span<const uint32_t> prompt,
         const gpt2::GenerateOptions& options, const Tokenizer* tokenizer, int logprobs)
    : gen_(config, prompt, options, tokenizer), logprobs_(logprobs) {}

bool Job::wait(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return finished_ || !events_.empty(); });
  for (TokenEvent& e : events_) out.push_back(std::move(e));
  events_.clear();
  return finished_;
}

std::vector<TokenEvent> Job::wait_all() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return finished_; });
  return std::move(events_);
}

gpt2::GenerateResult Job::result() const {
  std::lock_guard lk(mu_);
  return gen_.result();
}

std::string Job::error() const {
  std::lock_guard lk(mu_);
  return error_;
}

double Job::seconds_to_first_token() const {
  std::lock_guard lk(mu_);
  return ttft_;
}

std::pair<bool, uint32_t> Job::advance(std::span<const float> logits) {
  std::lock_guard lk(mu_);
  TokenEvent e;
  e.id = gen_.sample(logits);
  if (logprobs_ >= 0) e.logprobs = token_logprobs(logits, e.id, logprobs_);
  e.text = gen_.accept(e.id);
  if (ttft_ < 0) ttft_ = std::chrono::duration<double>(Clock::now() - submitted_).count();
  events_.push_back(std::move(e));
  cv_.notify_all();
  return {gen_.done(), gen_.result().ids.back()};
}

void Job::finish(const std::string& reason, const std::string& error) {
  std::lock_guard lk(mu_);
  if (!gen_.done()) {
    std::string rest = gen_.stop(reason);  // the text held back, now final
    if (!rest.empty()) {
      TokenEvent e;
      e.token = false;
      e.text = std::move(rest);
      events_.push_back(std::move(e));
    }
  }
  finished_ = true;
  error_ = error;
  cv_.notify_all();
}

bool Job::ended() const {
  std::lock_guard lk(mu_);
  return gen_.done();
}

// ---- Engine ----------------------------------------------------------------------------------

Engine::Engine(const gpt2::Model& model, const Tokenizer* tokenizer, const EngineOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      cache_(model, options.parallel >= 1
                        ? options.parallel
                        : throw Error(ErrorKind::Range, "serve: --parallel must be >= 1, got " +
                                                            std::to_string(options.parallel))),
      slots_(static_cast<size_t>(options.parallel)) {
  if (options.max_queue < 0)
    throw Error(ErrorKind::Range,
                "serve: the queue length must be >= 0, got " + std::to_string(options.max_queue));
  stats_.slots = options.parallel;
  stats_.decode_steps.assign(static_cast<size_t>(options.parallel) + 1, 0);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lk(mu_);
    stopping_ = abort_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Job> Engine::submit(std::span<const uint32_t> prompt,
                                    const gpt2::GenerateOptions& options, int logprobs) {
  auto job = std::make_shared<Job>(model_.config(), prompt, options, tokenizer_, logprobs);
  std::lock_guard lk(mu_);
  if (stopping_ ||
      static_cast<int>(queue_.size()) >= options_.max_queue + (options_.parallel - busy_))
    return nullptr;
  if (job->ended()) {  // max_tokens 0: nothing to generate
    job->finish("length");
    return job;
  }
  queue_.push_back(job);
  stats_.queue_depth = static_cast<int64_t>(queue_.size());
  cv_.notify_all();
  return job;
}

void Engine::drain() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard lk(mu_);
  EngineStats s = stats_;
  s.slots_busy = busy_;
  s.queue_depth = static_cast<int64_t>(queue_.size());
  const auto now = Clock::now();
  int64_t tokens = 0;
  for (const auto& [t, n] : recent_)
    if (now - t <= std::chrono::seconds(10)) tokens += n;
  s.tokens_per_second = static_cast<double>(tokens) / 10.0;
  return s;
}

void Engine::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] {
      return abort_ || busy_ > 0 || (!queue_.empty() && busy_ < options_.parallel) ||
             (stopping_ && queue_.empty());
    });
    if (abort_) break;
    if (stopping_ && queue_.empty() && busy_ == 0) return;
    std::vector<int> joined;
    for (int r = 0; r < options_.parallel && !queue_.empty(); ++r) {
      if (slots_[static_cast<size_t>(r)].job) continue;
      std::shared_ptr<Job> job = std::move(queue_.front());
      queue_.pop_front();
      slots_[static_cast<size_t>(r)].job = std::move(job);
      ++busy_;
      joined.push_back(r);
    }
    stats_.queue_depth = static_cast<int64_t>(queue_.size());
    lk.unlock();
    for (int r : joined) join(r);
    step();
    lk.lock();
  }
  // Aborted: whatever is queued or running ends as cancelled.
  for (Slot& s : slots_)
    if (s.job) {
      s.job->finish("cancelled");
      s.job.reset();
    }
  busy_ = 0;
  for (auto& job : queue_) job->finish("cancelled");
  queue_.clear();
}

void Engine::join(int row) {
  Slot& slot = slots_[static_cast<size_t>(row)];
  if (slot.job->cancelled()) return release(row);
  try {
    const std::span<const uint32_t> prompt = slot.job->gen_.prompt();
    cache_.reset(row);
    const Tensor logits =
        model_.prefill(Tensor::from_vector(std::vector<uint32_t>(prompt.begin(), prompt.end()),
                                           {1, static_cast<int64_t>(prompt.size())}),
                       cache_, row);
    {
      std::lock_guard lk(mu_);
      stats_.prompt_tokens += static_cast<int64_t>(prompt.size());
    }
    const std::vector<float> host = read_async(logits).get<float>();
    take(row, host);
  } catch (const std::exception& e) {
    release(row, e.what());
  }
}

void Engine::step() {
  std::vector<int64_t> rows;
  std::vector<uint32_t> tokens;
  for (int r = 0; r < options_.parallel; ++r) {
    Slot& s = slots_[static_cast<size_t>(r)];
    if (!s.job) continue;
    if (s.job->cancelled()) {  // a client that went away: its slot frees now
      release(r);
      continue;
    }
    rows.push_back(r);
    tokens.push_back(s.next);
  }
  if (rows.empty()) return;
  try {
    const Tensor logits = model_.decode(tokens, rows, cache_);
    const std::vector<float> host = read_async(logits).get<float>();
    const size_t V = host.size() / rows.size();
    {
      std::lock_guard lk(mu_);
      ++stats_.decode_steps[rows.size()];
    }
    for (size_t i = 0; i < rows.size(); ++i)
      take(static_cast<int>(rows[i]), std::span<const float>(host).subspan(i * V, V));
  } catch (const std::exception& e) {
    for (int64_t r : rows)
      if (slots_[static_cast<size_t>(r)].job) release(static_cast<int>(r), e.what());
  }
}

void Engine::take(int row, std::span<const float> logits) {
  Slot& slot = slots_[static_cast<size_t>(row)];
  const auto [done, id] = slot.job->advance(logits);
  {
    std::lock_guard lk(mu_);
    ++stats_.generated_tokens;
    if (slot.job->gen_.result().ids.size() == 1) {  // advance() wrote it; only this thread does
      stats_.ttft_seconds_sum += slot.job->ttft_;
      ++stats_.ttft_count;
    }
    const auto now = Clock::now();
    if (!recent_.empty() && now - recent_.back().first < std::chrono::milliseconds(100))
      ++recent_.back().second;
    else
      recent_.emplace_back(now, 1);
    while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10))
      recent_.pop_front();
  }
  if (done)
    release(row);
  else
    slot.next = id;
}

void Engine::release(int row, const std::string& error) {
  Slot& slot = slots_[static_cast<size_t>(row)];
  slot.job->finish(error.empty() ? "cancelled" : "error", error);
  slot.job.reset();
  std::lock_guard lk(mu_);
  --busy_;
  ++stats_.jobs_done;
}

}  // namespace forge::serve
