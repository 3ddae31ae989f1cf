// The process-wide CPU thread pool's size.
#pragma once

namespace forge {

/// Worker threads CPU kernels use (the calling thread counts as one). Default: the
/// FORGE_NUM_THREADS environment variable, else all hardware threads.
int num_threads();
/// Resizes the pool (1 <= n <= 1024; Error(Range) otherwise), once the parallel region in
/// progress on another thread (if any) has finished. From inside a parallel task it would
/// wait for itself: Error(Backend).
void set_num_threads(int n);

}  // namespace forge
