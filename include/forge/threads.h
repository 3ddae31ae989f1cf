// The process-wide CPU thread pool's size.
#pragma once

namespace forge {

/// Worker threads CPU kernels use (the calling thread counts as one). Default: the
/// FORGE_NUM_THREADS environment variable, else all hardware threads.
int num_threads();
/// Resizes the pool (n >= 1; Error(Range) otherwise). Not thread-safe with running ops.
void set_num_threads(int n);

}  // namespace forge
