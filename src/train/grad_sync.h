// GradSync: a data-parallel step's gradients summed across the job's ranks in buckets, each
// bucket's sum started as soon as the backward pass has completed the gradients of its
// parameters, so that the sums travel while the rest of the pass runs (PyTorch DDP's
// bucketing, on forge's Tape::backward hook). CPU gradients are summed by the job itself
// (MPI); a GPU's by a group of the job's ranks on their devices (forge/device_group.h:
// NCCL on cuda), which the constructor sets up through the job.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/device_group.h"
#include "forge/dist.h"

namespace forge::train {

class GradSync {
 public:
  /// Buckets of bucket_bytes (the last one of a step smaller): gradients are packed back to
  /// back, a large one split over several buckets. Every parameter must be on one device;
  /// for a device other than the CPU, every rank of `comm` joins a group on its device
  /// (collective; Error(Unsupported) naming the cause where the device has none).
  GradSync(dist::Comm& comm, const std::vector<ag::Parameter>& params, size_t bucket_bytes);

  /// p's gradient is complete on this rank (Tape::backward's GradReady): adds it to the open
  /// bucket and starts the bucket's sum once it is full. Every rank calls it for the same
  /// parameters in the same order (they recorded the same ops), so buckets match.
  void ready(const ag::Parameter& p);
  /// Starts the last bucket, waits for every sum and writes the sums back into the
  /// gradients (on a GPU: queues the wait and the copies). Afterwards every rank holds the
  /// same summed gradients.
  void finish();

  /// After each later finish(), writes the step's timeline of a device group (when each
  /// bucket was ready, when its sum ran, when the backward pass ended) to `path` as a Chrome
  /// trace (chrome://tracing, ui.perfetto.dev), replacing the last step's. "" turns it off.
  /// Error(Unsupported) for CPU gradients (their sums run inside MPI, on the host).
  void set_timeline(const std::string& path);

 private:
  struct Piece {
    size_t param;   // index into params_
    size_t offset;  // of the piece's first element in that parameter's gradient
    size_t count;
  };
  struct Bucket {
    std::vector<Piece> pieces;  // in packing order
    Tensor data;                // [bucket_floats_] on the gradients' device
    size_t filled = 0;          // elements packed
  };
  void open_bucket();
  void start(Bucket& b);
  void write_timeline();

  dist::Comm& comm_;
  std::vector<ag::Parameter> params_;
  Device device_;
  std::unique_ptr<DeviceGroup> group_;  // null for CPU gradients
  size_t bucket_floats_;
  std::vector<Bucket> buckets_;  // this step's; the buffers are kept for the next
  size_t used_ = 0;              // buckets of this step (buckets_[used_ - 1] is open)
  bool open_ = false;
  std::string timeline_path_;
};

}  // namespace forge::train
