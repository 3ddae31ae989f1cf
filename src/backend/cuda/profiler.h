// Device time per kernel, for `--profile` (Backend::set_profiling / kernel_times): while a
// span is on, every launch on the context's stream is bracketed by a pair of timing
// events; times() waits for the stream and sums each kernel's elapsed times.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "forge/device_queue.h"

namespace forge::cuda {

class Context;

class Profiler {
 public:
  explicit Profiler(const Context& context) : context_(context) {}
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  /// Starts a fresh span (on) or ends it (off; its marks are kept for times()).
  void set_on(bool on);
  bool on() const { return on_; }
  /// Around one launch queued on the stream (no-ops while off).
  void begin(const char* kernel);
  void end();
  /// The span's totals per kernel, slowest first (waits for the stream).
  std::vector<KernelTime> times();

 private:
  CUevent take_event();
  void recycle();

  struct Mark {
    const char* kernel;  // a string literal
    CUevent start, end;
  };
  const Context& context_;
  std::atomic<bool> on_{false};
  std::mutex mutex_;
  std::vector<Mark> marks_;
  std::vector<CUevent> spare_;
};

}  // namespace forge::cuda
