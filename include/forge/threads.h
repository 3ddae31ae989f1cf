// The process-wide CPU thread pool: its size, and parallel work on it.
#pragma once

#include <cstdint>
#include <functional>

namespace forge {

/// Worker threads CPU kernels use (the calling thread counts as one). Default: the
/// FORGE_NUM_THREADS environment variable, else all hardware threads.
int num_threads();
/// Resizes the pool (1 <= n <= 1024; Error(Range) otherwise), once the parallel region in
/// progress on another thread (if any) has finished. From inside a parallel task it would
/// wait for itself: Error(Backend).
void set_num_threads(int n);

/// Runs fn(task) for every task in [0, n_tasks) on the pool's threads, the caller's included,
/// and returns when all are done; the first exception a task throws is rethrown here. Calls
/// from inside a task run serially; callers on other threads take turns. Library code runs
/// its parallel work here, not on threads of its own, so that --threads bounds it (and a
/// wasm build with threads needs no more workers than the pool's).
void parallel_tasks(int64_t n_tasks, const std::function<void(int64_t task)>& fn);

}  // namespace forge
