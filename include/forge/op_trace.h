// A record of which ops run: the functions of ops.h called on this thread while an OpTrace
// is alive, outermost calls only (the parts of a fused op's composition are not listed, nor
// calls that had nothing to compute), by the function's name ("layernorm_matmul", "add_").
// For tests and tools that check what a model runs (tests/test_gpt2_definition.cpp).
#pragma once

#include <string>
#include <vector>

namespace forge {

class OpTrace {
 public:
  /// Starts recording on this thread; an OpTrace made while another is alive records
  /// instead of it until it ends.
  OpTrace();
  ~OpTrace();
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  /// The calls so far, in order.
  const std::vector<std::string>& ops() const { return ops_; }

 private:
  friend struct OpTraceAccess;
  std::vector<std::string> ops_;
  OpTrace* outer_ = nullptr;
};

}  // namespace forge
