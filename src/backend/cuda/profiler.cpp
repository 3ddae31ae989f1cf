#include "backend/cuda/profiler.h"

#include <algorithm>
#include <map>

#include "backend/cuda/context.h"

namespace forge::cuda {

Profiler::~Profiler() {
  recycle();
  for (CUevent e : spare_) driver().event_destroy(e);
}

void Profiler::recycle() {
  for (const Mark& m : marks_) {
    spare_.push_back(m.start);
    spare_.push_back(m.end);
  }
  marks_.clear();
}

void Profiler::set_on(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (on) {
    context_.synchronize();  // the events of the last span may still be pending
    recycle();
  }
  on_ = on;
}

CUevent Profiler::take_event() {
  if (!spare_.empty()) {
    const CUevent e = spare_.back();
    spare_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  check(driver().event_create(&e, 0), "cuEventCreate");  // flags 0: with timing
  return e;
}

void Profiler::begin(const char* kernel) {
  if (!on_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Mark m{kernel, take_event(), take_event()};
  check(driver().event_record(m.start, context_.stream()), "cuEventRecord");
  marks_.push_back(m);
}

void Profiler::end() {
  if (!on_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (marks_.empty()) return;
  check(driver().event_record(marks_.back().end, context_.stream()), "cuEventRecord");
}

std::vector<KernelTime> Profiler::times() {
  std::lock_guard<std::mutex> lock(mutex_);
  context_.synchronize();
  std::map<std::string, KernelTime> per_kernel;
  for (const Mark& m : marks_) {
    float ms = 0.0f;
    check(driver().event_elapsed_time(&ms, m.start, m.end), "cuEventElapsedTime");
    KernelTime& t = per_kernel[m.kernel];
    t.kernel = m.kernel;
    t.dispatches += 1;
    t.ms += ms;
  }
  std::vector<KernelTime> out;
  for (auto& [name, t] : per_kernel) out.push_back(t);
  std::sort(out.begin(), out.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace forge::cuda
