// The process-wide CPU thread pool. The calling thread works too, so a pool of size n
// keeps n - 1 worker threads. Nested calls from inside a task run serially.
#pragma once

#include <cstdint>
#include <functional>

namespace forge::cpu {

/// Runs fn(task) for every task in [0, n_tasks), spread over the pool; returns when all
/// are done. The first exception thrown by a task is rethrown here.
void run_tasks(int64_t n_tasks, const std::function<void(int64_t task)>& fn);

/// Threads the pool uses, the caller included.
int pool_size();

/// Splits [0, n) into at most pool_size() contiguous ranges of at least `grain` items and
/// runs fn(begin, end) on each; serial when n is small.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t parts = n / grain;
  const int64_t threads = pool_size();
  if (parts > threads) parts = threads;
  if (parts <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  run_tasks(parts, [&](int64_t p) {
    const int64_t begin = n * p / parts;
    const int64_t end = n * (p + 1) / parts;
    fn(begin, end);
  });
}

}  // namespace forge::cpu
