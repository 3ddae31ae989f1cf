// forge serve's engine (src/serve/engine.h): continuous batching gives every sequence the
// tokens gpt2::generate gives it alone (on the CPU, bit for bit, with sampling too); the
// queue is bounded; cancelled jobs free their slots; drain lets running jobs finish.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "device_test_util.h"
#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "gpt2_test_util.h"
#include "serve/engine.h"

namespace forge::serve {
namespace {

gpt2::Config engine_config(int64_t n_ctx = 96) {
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 128;
  c.n_ctx = n_ctx;
  c.vocab_size = 1000;
  c.bos_id = c.eos_id = 0;
  return c;
}

TEST(ServeEngine, BatchedSequencesGetTheTokensOfGeneratingAlone) {
  const gpt2::Model m = gpt2::Model::random(engine_config(), 5);
  Engine engine(m, nullptr, EngineOptions{8, 16});  // batches of 1-8: both GEMM row groups
  struct Case {
    std::vector<uint32_t> prompt;
    gpt2::GenerateOptions o;
  };
  std::vector<Case> cases;
  for (uint32_t i = 0; i < 10; ++i) {
    Case c;
    c.prompt = test::test_ids(1 + 5 * i % 23, 1000, 70 + i);
    c.o.max_new_tokens = 6 + 3 * (i % 5);
    c.o.stop_at_eos = i % 3 != 0;
    SamplingParams& s = c.o.sampling;
    s.seed = 100 + i;
    if (i % 2 == 0) {
      s.greedy = true;
    } else {
      s.temperature = 0.9f;
      s.top_k = i % 4 == 1 ? 50 : 0;
      s.top_p = 0.95f;
      s.frequency_penalty = i == 3 ? 0.5f : 0.0f;
      s.repeat_penalty = i == 5 ? 1.3f : 1.0f;
    }
    cases.push_back(c);
  }
  std::vector<std::shared_ptr<Job>> jobs;
  for (const Case& c : cases) jobs.push_back(engine.submit(c.prompt, c.o));
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(jobs[i]) << "job " << i << " refused";
    const std::vector<TokenEvent> events = jobs[i]->wait_all();
    const gpt2::GenerateResult want = gpt2::generate(m, cases[i].prompt, cases[i].o);
    const gpt2::GenerateResult got = jobs[i]->result();
    EXPECT_EQ(jobs[i]->error(), "");
    EXPECT_EQ(got.ids, want.ids) << "sequence " << i;
    EXPECT_EQ(got.stop_reason, want.stop_reason) << "sequence " << i;
    std::vector<uint32_t> streamed;
    for (const TokenEvent& e : events)
      if (e.token) streamed.push_back(e.id);
    EXPECT_EQ(streamed, want.ids) << "the events of sequence " << i;
    EXPECT_GE(jobs[i]->seconds_to_first_token(), 0.0);
  }
  const EngineStats s = engine.stats();
  int64_t batched = 0;
  for (size_t k = 2; k < s.decode_steps.size(); ++k) batched += s.decode_steps[k];
  EXPECT_GT(batched, 0) << "no decode step ran more than one sequence";
  EXPECT_EQ(s.slots, 8);
  EXPECT_EQ(s.slots_busy, 0);
  EXPECT_EQ(s.queue_depth, 0);
  EXPECT_EQ(s.jobs_done, 10);
  EXPECT_EQ(s.ttft_count, 10);
}

TEST(ServeEngine, LogprobsAreThoseOfTheLogitsEachTokenCameFrom) {
  const gpt2::Model m = gpt2::Model::random(engine_config(), 6);
  Engine engine(m, nullptr, EngineOptions{2, 4});
  gpt2::GenerateOptions o;
  o.max_new_tokens = 5;
  o.sampling.greedy = true;
  const std::vector<uint32_t> prompt = test::test_ids(7, 1000, 3);
  const auto job = engine.submit(prompt, o, 3);
  ASSERT_TRUE(job);
  const std::vector<TokenEvent> events = job->wait_all();
  // The logits of each step, decoded alone.
  const auto alone = test::decode_alone(m, prompt, 4);
  ASSERT_EQ(events.size(), 5u);
  for (size_t i = 0; i < events.size(); ++i) {
    ASSERT_TRUE(events[i].logprobs);
    const TokenLogprobs want = token_logprobs(alone[i], events[i].id, 3);
    EXPECT_EQ(events[i].logprobs->logprob, want.logprob);
    EXPECT_EQ(events[i].logprobs->top, want.top);
    EXPECT_EQ(events[i].logprobs->top[0].first, events[i].id);  // greedy: the top one
  }
}

TEST(ServeEngine, TheQueueIsBoundedAndCancelledJobsFreeTheirSlots) {
  const gpt2::Model m = gpt2::Model::random(engine_config(512), 7);
  Engine engine(m, nullptr, EngineOptions{1, 1});
  gpt2::GenerateOptions longer;
  longer.max_new_tokens = 500;
  longer.stop_at_eos = false;
  longer.sampling.greedy = true;
  const std::vector<uint32_t> prompt = {1, 2, 3};
  const auto a = engine.submit(prompt, longer);  // takes the slot (or waits for it)
  const auto b = engine.submit(prompt, longer);  // waits in the queue
  const auto c = engine.submit(prompt, longer);  // one slot + one queue place: refused
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_FALSE(c);
  a->cancel();
  b->cancel();
  (void)a->wait_all();
  (void)b->wait_all();
  EXPECT_EQ(a->result().stop_reason, "cancelled");
  EXPECT_LT(a->result().ids.size(), 500u);
  EXPECT_EQ(b->result().stop_reason, "cancelled");
  // The slot is free again.
  gpt2::GenerateOptions shorter = longer;
  shorter.max_new_tokens = 3;
  const auto d = engine.submit(prompt, shorter);
  ASSERT_TRUE(d);
  (void)d->wait_all();
  EXPECT_EQ(d->result().ids.size(), 3u);
  EXPECT_EQ(d->result().stop_reason, "length");
}

TEST(ServeEngine, DrainFinishesWhatRunsAndRefusesMore) {
  const gpt2::Model m = gpt2::Model::random(engine_config(), 8);
  Engine engine(m, nullptr, EngineOptions{2, 8});
  gpt2::GenerateOptions o;
  o.max_new_tokens = 20;
  o.stop_at_eos = false;
  std::vector<std::shared_ptr<Job>> jobs;
  for (uint32_t i = 0; i < 5; ++i) jobs.push_back(engine.submit(std::vector<uint32_t>{i + 1}, o));
  engine.drain();
  for (const auto& j : jobs) {
    ASSERT_TRUE(j);
    std::vector<TokenEvent> rest;
    EXPECT_TRUE(j->wait(rest, std::chrono::milliseconds(0)));  // finished already
    EXPECT_EQ(j->result().ids.size(), 20u);
    EXPECT_EQ(j->result().stop_reason, "length");
  }
  EXPECT_FALSE(engine.submit(std::vector<uint32_t>{1}, o));
}

TEST(ServeEngine, BadJobsAreRefusedAtSubmit) {
  const gpt2::Model m = gpt2::Model::random(engine_config(16), 9);
  Engine engine(m, nullptr, EngineOptions{1, 1});
  gpt2::GenerateOptions o;
  EXPECT_FORGE_ERROR(engine.submit(std::vector<uint32_t>(17, 1), o), ErrorKind::Range, "generate",
                     "more than the model's context of 16");
  EXPECT_FORGE_ERROR(engine.submit(std::vector<uint32_t>{1000}, o), ErrorKind::Range, "generate",
                     "outside the vocabulary");
  EXPECT_FORGE_ERROR(engine.submit(std::vector<uint32_t>{}, o), ErrorKind::Range, "generate",
                     "no tokens");
  o.sampling.top_p = 0;
  EXPECT_FORGE_ERROR(engine.submit(std::vector<uint32_t>{1}, o), ErrorKind::Range, "sampling",
                     "top-p");
  o.sampling.top_p = 1;
  o.max_new_tokens = 0;  // nothing to do: done at once
  const auto j = engine.submit(std::vector<uint32_t>{1}, o);
  ASSERT_TRUE(j);
  EXPECT_TRUE(j->wait_all().empty());
  EXPECT_EQ(j->result().stop_reason, "length");
  EXPECT_FORGE_ERROR(Engine(m, nullptr, EngineOptions{0, 1}), ErrorKind::Range, "serve",
                     "--parallel");
}

TEST(ServeEngine, DestroyingTheEngineCancelsWhatIsLeft) {
  const gpt2::Model m = gpt2::Model::random(engine_config(512), 10);
  std::shared_ptr<Job> running, queued;
  {
    Engine engine(m, nullptr, EngineOptions{1, 4});
    gpt2::GenerateOptions o;
    o.max_new_tokens = 500;
    o.stop_at_eos = false;
    running = engine.submit(std::vector<uint32_t>{1}, o);
    queued = engine.submit(std::vector<uint32_t>{2}, o);
  }
  ASSERT_TRUE(running && queued);
  (void)running->wait_all();
  (void)queued->wait_all();
  EXPECT_EQ(queued->result().stop_reason, "cancelled");
  EXPECT_TRUE(running->result().stop_reason == "cancelled" || running->result().ids.size() == 500u);
}

}  // namespace
}  // namespace forge::serve
