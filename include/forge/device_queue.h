// A device as a queue of work, at the op level: reads that let the device run ahead of the
// host, steps recorded once and run many times, waiting, and device-side profiles. Models,
// training and the CLI use this header, never forge/backend.h.
//
// Every backend can implement it natively. GPU APIs such as CUDA replay recorded command
// buffers and read through fences; WebGPU, whose command buffers are not replayable and
// whose reads are asynchronous only (mapAsync), encodes each step again and maps buffers;
// the CPU runs each step again and reads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "forge/device.h"
#include "forge/dtype.h"
#include "forge/tensor.h"

namespace forge {

/// A read of a tensor's values queued behind the work enqueued so far on its device
/// (read_async). Work queued after it runs on without waiting for the host: a decode loop
/// queues step n + 1 before it takes step n's token. Move-only; dropping an untaken read
/// waits for it and discards the bytes.
class PendingRead {
 public:
  PendingRead() = default;
  PendingRead(PendingRead&& o) noexcept { *this = std::move(o); }
  PendingRead& operator=(PendingRead&& o) noexcept;
  PendingRead(const PendingRead&) = delete;
  PendingRead& operator=(const PendingRead&) = delete;
  ~PendingRead();

  /// Whether a read is outstanding (false once taken, and for a default-made one).
  bool pending() const { return ticket_ != 0; }
  /// Waits for the work queued before the read (not for later work) and returns the values.
  /// Once: Error(Backend) when taken already; Error(DType) if T is not the tensor's dtype.
  template <typename T>
  std::vector<T> get();

 private:
  friend PendingRead read_async(const Tensor& t);
  void drop() noexcept;  // waits for an untaken read and discards it
  Device device_;
  uint64_t ticket_ = 0;
  size_t bytes_ = 0;
  DType dtype_ = DType::F32;
};

/// Queues a read of `t` (any device; on the CPU it reads at once). Error(Shape) for an
/// undefined tensor.
PendingRead read_async(const Tensor& t);

class Graph;  // a backend's recording (forge/backend.h)

/// A step of ops, recorded once and run many times with the same buffers (a decode step).
///
/// `body` calls ops on `device`. The values that change between runs must reach its ops
/// through tensors the host writes before run() (a token and its position), never through
/// host values baked into an op's parameters; its results must be left in tensors the
/// caller holds (body assigns them, or writes them with an *_into op). On a device that
/// can replay, the first run() records body and every run() replays the recording; on any
/// other (the CPU, WebGPU, a GPU while profiling, FORGE_DECODE_GRAPH=0) each run() calls
/// body again. Both orders of work are the same ops: the results are the same.
class RecordedStep {
 public:
  RecordedStep(Device device, std::function<void()> body);
  ~RecordedStep();
  RecordedStep(const RecordedStep&) = delete;
  RecordedStep& operator=(const RecordedStep&) = delete;

  /// Records the step now where the device replays (run() does it otherwise), so that the
  /// host's writes of its inputs for the first run join that run's submission instead of
  /// being flushed by the recording. Nothing elsewhere.
  void record();
  /// Queues the step's work (no wait). Errors of body propagate; a recording that failed
  /// halfway is dropped, and the next run() tries again.
  void run();
  /// Whether runs replay a recording (after the first run()).
  bool replays() const { return graph_ != nullptr; }
  /// Whether a step recorded on `device` now would replay (a model may then prefer a
  /// recorded step to calling the same ops itself).
  static bool replays_on(Device device);
  Device device() const { return device_; }

 private:
  Device device_;
  std::function<void()> body_;
  std::shared_ptr<Graph> graph_;
};

/// Waits until all work queued on `device` has finished.
void synchronize(Device device);

/// What a device's queue has done since it was made, for tests and metrics: how often the
/// host handed it work, replays of recorded steps, and allocations of device memory that no
/// pooled buffer served. counted = false (and zeros) on a device that keeps no count (the
/// CPU, whose buffers are plain host memory).
struct DeviceStats {
  bool counted = false;
  uint64_t submits = 0;
  uint64_t replays = 0;
  uint64_t allocations = 0;
  uint64_t dispatches = 0;
  uint64_t reads = 0;  // reads of device memory by the host (each waits for queued work)
  // The most device memory live tensors have held at once since the device opened (bytes;
  // 0 where the backend does not track it: the CPU, Vulkan, WebGPU).
  uint64_t peak_bytes = 0;
};
DeviceStats device_stats(Device device);

/// Device time of one kernel over a profiled span.
struct KernelTime {
  std::string kernel;  // the kernel (a GPU's: shader) name
  uint64_t dispatches = 0;
  double ms = 0.0;  // device time between the timestamps around each dispatch
};

/// Device-side timing (GPU timestamp queries), for `--profile`: profiling(d, true) starts a
/// fresh span (and turns recorded steps into plain runs, whose kernels it can time);
/// kernel_times(d) finishes the queued work and returns the span's totals per kernel,
/// slowest first. The CPU, whose kernels finish on the calling thread, times each kernel
/// call with host clocks. Error(Unsupported) on a device without timers.
void set_profiling(Device device, bool on);
std::vector<KernelTime> kernel_times(Device device);

}  // namespace forge
