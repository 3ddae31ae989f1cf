// The CPU thread pool (src/backend/cpu/thread_pool.cpp) under the ways callers use it: an
// exception thrown by a worker, nested parallel regions, two user threads running ops at
// once, and the pool resized while work runs. scripts/test.sh also runs these under
// ThreadSanitizer, which reports the data races a passing run can hide.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "forge/forge.h"

namespace forge::test {
namespace {

/// Sets the pool's size for one test and restores the previous size after it.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37) % 101) * scale - 0.5f;
  return v;
}

// A few ops whose CPU kernels split their work over the pool: a product big enough for
// the threaded GEMM, softmax and layernorm over many rows.
struct Work {
  Tensor a = Tensor::from_vector(ramp(96 * 160, 0.01f), {96, 160});
  Tensor b = Tensor::from_vector(ramp(160 * 112, 0.007f), {160, 112});
  Tensor g = Tensor::from_vector(ramp(112, 0.02f), {112});
  Tensor be = Tensor::from_vector(ramp(112, 0.03f), {112});

  std::vector<float> run() const {
    const Tensor y = layernorm(softmax(matmul(a, b)), g, be);
    return y.to_vector<float>();
  }
};

TEST(ThreadPool, AnExceptionThrownInAWorkerReachesTheCaller) {
  const ScopedThreads threads(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> worker_ran{false};
    // Two tasks: the caller's waits inside its task until the other task has started on a
    // worker (which must then exist and take it), and that one throws.
    auto task = [&](int64_t) {
      if (std::this_thread::get_id() == caller) {
        while (!worker_ran.load()) std::this_thread::yield();
        return;
      }
      worker_ran.store(true);
      throw std::runtime_error("thrown on a worker");
    };
    try {
      cpu::run_tasks(2, task);
      ADD_FAILURE() << "round " << round << ": the worker's exception was lost";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "thrown on a worker");
    }
    EXPECT_TRUE(worker_ran.load());
  }
  // The pool still works afterwards, every task exactly once.
  std::vector<std::atomic<int>> hits(64);
  cpu::run_tasks(64, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, OnlyTheFirstOfSeveralExceptionsIsRethrownAndEveryTaskRuns) {
  const ScopedThreads threads(3);
  std::atomic<int> ran{0};
  try {
    cpu::run_tasks(100, [&](int64_t t) {
      ran.fetch_add(1);
      if (t % 10 == 3) throw Error(ErrorKind::Range, "task " + std::to_string(t));
    });
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Range);
    EXPECT_EQ(std::string(e.what()).rfind("task ", 0), 0u) << e.what();
  }
  EXPECT_EQ(ran.load(), 100) << "a task failing must not stop the others being run";
}

TEST(ThreadPool, NestedRegionsRunSeriallyInsideTheirTask) {
  const ScopedThreads threads(3);
  constexpr int64_t kOuter = 12, kInner = 50;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  std::atomic<int> wrong_thread{0};
  cpu::run_tasks(kOuter, [&](int64_t o) {
    const std::thread::id outer = std::this_thread::get_id();
    cpu::parallel_for(kInner, 1, [&](int64_t begin, int64_t end) {
      if (std::this_thread::get_id() != outer) wrong_thread.fetch_add(1);
      for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(o * kInner + i)].fetch_add(1);
      // A third level, from inside the nested one.
      cpu::run_tasks(3, [&](int64_t) {
        if (std::this_thread::get_id() != outer) wrong_thread.fetch_add(1);
      });
    });
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_EQ(wrong_thread.load(), 0) << "a nested region left the thread of its task";
}

TEST(ThreadPool, TwoUserThreadsRunOpsAtOnce) {
  const ScopedThreads threads(2);
  const Work work;
  const std::vector<float> want = work.run();
  std::atomic<int> mismatches{0};
  auto user = [&] {
    for (int i = 0; i < 25; ++i)
      if (work.run() != want) mismatches.fetch_add(1);
  };
  std::thread first(user), second(user);
  user();  // a third one: this thread
  first.join();
  second.join();
  EXPECT_EQ(mismatches.load(), 0)
      << "results differ from a run alone (the same pool size cuts the work the same way)";
}

TEST(ThreadPool, ResizingWhileAnotherThreadRunsOps) {
  const ScopedThreads threads(2);
  const Work work;
  const std::vector<float> want = work.run();
  std::atomic<bool> stop{false};
  std::atomic<int> runs{0}, mismatches{0};
  std::thread user([&] {
    while (!stop.load()) {
      const std::vector<float> got = work.run();
      // Another pool size may cut the GEMM differently: the rounding may differ, little.
      for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(got[i] - want[i]) <= 1e-4f)) {
          mismatches.fetch_add(1);
          break;
        }
      runs.fetch_add(1);
    }
  });
  // 40 resizes, each once the user thread has finished another run since the last one (so
  // that it is not starved of the pool), mostly landing while it is inside its next.
  for (int i = 0; i < 40; ++i) {
    const int seen = runs.load();
    while (runs.load() == seen) std::this_thread::yield();
    set_num_threads(1 + i % 4);
  }
  stop.store(true);
  user.join();
  EXPECT_EQ(mismatches.load(), 0);
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
}

TEST(ThreadPool, ResizingFromInsideATaskIsAnError) {
  const ScopedThreads threads(2);
  std::atomic<int> errors{0};
  cpu::run_tasks(4, [&](int64_t) {
    try {
      set_num_threads(3);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Backend) errors.fetch_add(1);
    }
  });
  EXPECT_EQ(errors.load(), 4);
  EXPECT_EQ(num_threads(), 2);
}

TEST(ThreadPool, EveryTaskOnceAtEverySize) {
  for (int n : {1, 2, 3, 8}) {
    const ScopedThreads threads(n);
    EXPECT_EQ(num_threads(), n);
    for (int64_t tasks : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
      cpu::run_tasks(tasks, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
      for (const auto& h : hits) EXPECT_EQ(h.load(), 1) << n << " threads, " << tasks << " tasks";
    }
    // parallel_for covers [0, n) with disjoint ranges.
    std::vector<std::atomic<int>> cover(1001);
    cpu::parallel_for(1001, 7, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) cover[static_cast<size_t>(i)].fetch_add(1);
    });
    for (const auto& c : cover) EXPECT_EQ(c.load(), 1);
  }
}

TEST(ThreadPool, RejectsBadSizes) {
  for (int bad : {0, -1, 1025}) EXPECT_THROW(set_num_threads(bad), Error) << bad;
}

}  // namespace
}  // namespace forge::test
