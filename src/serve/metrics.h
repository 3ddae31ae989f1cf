// forge serve's /metrics: Prometheus text exposition (format 0.0.4) of the HTTP requests
// (by route and status), rejections, and the engine's counters (tokens, time to first
// token, tokens/s, queue depth, busy slots, decode steps by batch size).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "serve/engine.h"

namespace forge::serve {

class Metrics {
 public:
  void count_request(const std::string& route, int status);
  void count_rejected();
  /// The exposition text; `engine` is absent while the model loads.
  std::string render(const std::optional<EngineStats>& engine) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t rejected_ = 0;
};

}  // namespace forge::serve
