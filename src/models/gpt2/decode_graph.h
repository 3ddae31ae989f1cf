// A batch-1 decode step recorded once per KV cache and replayed for every token
// (Model::decode_graph): shared by forward.cpp and greedy.cpp.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "forge/backend.h"
#include "forge/tensor.h"

namespace forge::gpt2 {

/// What changes between steps, the token and its position, lives in `step` (U32 [2] on the
/// device), so the recorded kernels never change. The host writes both before each replay;
/// a greedy graph writes the token itself (the argmax of its logits, the next step's input).
struct DecodeGraph {
  std::vector<std::pair<const Storage*, size_t>> buffers;  // weights and caches it bakes in
  Tensor step;                                             // {token, position}
  Tensor logits;                                           // [1, V], rewritten by each replay
  std::shared_ptr<Graph> graph;
};

/// Captured decode steps: off with FORGE_DECODE_GRAPH=0 (to compare, or to profile kernels
/// one by one; profiling turns them off by itself).
inline bool decode_graphs_enabled() {
  const char* e = std::getenv("FORGE_DECODE_GRAPH");
  return !(e && std::string(e) == "0");
}

}  // namespace forge::gpt2
