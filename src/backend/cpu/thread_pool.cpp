// A small fork-join pool: workers spin briefly on a generation counter (decode issues many
// short parallel ops back to back, and waking a sleeping thread costs ~10-50 us), then
// sleep on a condition variable. Tasks are claimed from an atomic counter.
#include "backend/cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "forge/error.h"
#include "forge/threads.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FORGE_CPU_RELAX() _mm_pause()
#else
#define FORGE_CPU_RELAX() std::this_thread::yield()
#endif

namespace forge::cpu {
namespace {

thread_local bool t_inside_task = false;

class Pool {
 public:
  explicit Pool(int n) { start(n); }
  ~Pool() { stop(); }

  // Read without a lock by parallel_for (to split its range): a stale value only changes
  // how the work is cut, never what is computed.
  int size() const { return size_.load(std::memory_order_relaxed); }

  // Waits for the parallel region in progress (if any): workers are never replaced while
  // they may hold a task. From inside a task it would wait for itself, so it throws.
  void resize(int n) {
    if (t_inside_task)
      throw Error(ErrorKind::Backend,
                  "threads: set_num_threads called from inside a parallel task (it would wait "
                  "for the region that runs it)");
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    if (n == size()) return;
    stop();
    start(n);
  }

  void run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || t_inside_task) {  // nested regions run serially, in their task
      for (int64_t t = 0; t < n_tasks; ++t) fn(t);
      return;
    }
    // One parallel region at a time; resize() waits for it.
    std::unique_lock<std::mutex> run_lock(run_mutex_);
    if (workers_.empty()) {
      run_lock.unlock();
      for (int64_t t = 0; t < n_tasks; ++t) fn(t);
      return;
    }
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n_tasks = n_tasks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      wanted_ = static_cast<int>(std::min<int64_t>(n_tasks - 1, workers_.size()));
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    work(*job);
    // Wait for the tasks, not for the workers: a worker the OS has not scheduled yet may
    // wake after every task is done (it then finds none left), and must not hold us up.
    while (job->done.load(std::memory_order_acquire) != n_tasks) FORGE_CPU_RELAX();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_.reset();
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  // One parallel region. Workers hold it by shared_ptr, so a worker that wakes late touches
  // only its own (finished) job's counters, never the next region's. `fn` is called only
  // for a claimed task, and run() cannot return before every claimed task is done, so the
  // function it points to is alive whenever it is called.
  struct Job {
    const std::function<void(int64_t)>* fn = nullptr;
    int64_t n_tasks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex error_mutex;
    std::exception_ptr error;
  };

  void start(int n) {
    stopping_ = false;
    // The generation is read here, not in the new thread: a thread that starts late would
    // otherwise miss a run() or stop() issued meanwhile and wait forever (a hang at exit).
    const uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, gen] { loop(i, gen); });
    size_.store(n, std::memory_order_relaxed);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  static void work(Job& job) {
    const bool was_inside = t_inside_task;
    t_inside_task = true;
    for (;;) {
      const int64_t t = job.next.fetch_add(1, std::memory_order_relaxed);
      if (t >= job.n_tasks) break;
      try {
        (*job.fn)(t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
      }
      job.done.fetch_add(1, std::memory_order_release);
    }
    t_inside_task = was_inside;
  }

  void loop(int id, uint64_t seen) {
    for (;;) {
      // Spin a little, then sleep.
      uint64_t g = generation_.load(std::memory_order_acquire);
      for (int spin = 0; g == seen && spin < 20000; ++spin) {
        FORGE_CPU_RELAX();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      std::shared_ptr<Job> job;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
        if (id <= wanted_) job = job_;
      }
      if (job) work(*job);
    }
  }

  std::vector<std::thread> workers_;  // changed only under run_mutex_
  std::atomic<int> size_{1};
  std::mutex run_mutex_;
  std::mutex mutex_;  // guards job_, wanted_, stopping_
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::shared_ptr<Job> job_;
  int wanted_ = 0;
  bool stopping_ = false;
};

int default_threads() {
  if (const char* env = std::getenv("FORGE_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
  }
#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
  return 1;  // a wasm build without threads: the calling thread alone
#else
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
#endif
}

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

void run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn) { pool().run(n_tasks, fn); }
int pool_size() { return pool().size(); }

}  // namespace forge::cpu

namespace forge {

int num_threads() { return cpu::pool_size(); }

void set_num_threads(int n) {
  if (n < 1 || n > 1024)
    throw Error(ErrorKind::Range, "threads: " + std::to_string(n) + " is not in [1, 1024]");
  cpu::pool().resize(n);
}

void parallel_tasks(int64_t n_tasks, const std::function<void(int64_t task)>& fn) {
  cpu::run_tasks(n_tasks, fn);
}

}  // namespace forge
