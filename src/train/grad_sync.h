// GradSync: a data-parallel step's gradients summed across the job's ranks in buckets, each
// bucket started (a non-blocking MPI sum) as soon as the backward pass has completed the
// gradients of its parameters, so that the sums travel while the rest of the pass runs
// (PyTorch DDP's bucketing, on forge's Tape::backward hook).
#pragma once

#include <cstddef>
#include <vector>

#include "forge/autograd.h"
#include "forge/dist.h"

namespace forge::train {

class GradSync {
 public:
  /// Buckets of bucket_bytes (the last one of a step smaller): gradients are packed back to
  /// back, a large one split over several buckets. The parameters' gradients must be host
  /// (CPU) tensors.
  GradSync(dist::Comm& comm, const std::vector<ag::Parameter>& params, size_t bucket_bytes);

  /// p's gradient is complete on this rank (Tape::backward's GradReady): adds it to the open
  /// bucket and starts the bucket's sum once it is full. Every rank calls it for the same
  /// parameters in the same order (they recorded the same ops), so buckets match.
  void ready(const ag::Parameter& p);
  /// Starts the last bucket, waits for every sum and writes the sums back into the
  /// gradients. Afterwards every rank holds the same summed gradients.
  void finish();

 private:
  struct Piece {
    size_t param;   // index into params_
    size_t offset;  // of the piece's first element in that parameter's gradient
    size_t count;
  };
  struct Bucket {
    std::vector<Piece> pieces;  // in packing order
    std::vector<float> data;    // their elements, back to back
  };
  void open_bucket();
  void start(Bucket& b);

  dist::Comm& comm_;
  std::vector<ag::Parameter> params_;
  size_t bucket_floats_;
  std::vector<Bucket> buckets_;  // this step's; the buffers are kept for the next
  size_t used_ = 0;              // buckets of this step (buckets_[used_ - 1] is open)
  bool open_ = false;
};

}  // namespace forge::train
