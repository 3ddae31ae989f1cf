// A batch-1 decode step recorded once per KV cache and run for every token
// (Model::decode_graph): shared by forward.cpp and greedy.cpp.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "forge/device_queue.h"
#include "forge/tensor.h"

namespace forge::gpt2 {

/// What changes between steps, the token and its position, lives in `step` (U32 [2] on the
/// device), so the recorded ops never change. The host writes both before each run; a
/// greedy step writes the token itself (the argmax of its logits, the next step's input).
struct DecodeGraph {
  std::vector<std::pair<const Storage*, size_t>> buffers;  // weights and caches it bakes in
  Tensor step;                                             // {token, position}
  Tensor logits;  // [1, V], the last run's (a replay rewrites it in place)
  std::unique_ptr<RecordedStep> run;
};

}  // namespace forge::gpt2
