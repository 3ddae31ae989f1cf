// GradSync (grad_sync.h): bucketed, overlapped gradient sums for data-parallel training.
#include "train/grad_sync.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "forge/error.h"

namespace forge::train {

GradSync::GradSync(dist::Comm& comm, const std::vector<ag::Parameter>& params, size_t bucket_bytes)
    : comm_(comm), params_(params), bucket_floats_(std::max<size_t>(1, bucket_bytes / 4)) {
  for (const ag::Parameter& p : params_)
    if (p.value().device() != Device::cpu())
      throw Error(ErrorKind::Device, "train::GradSync: " + p.name() + " is on " +
                                         p.value().device().str() +
                                         "; summing gradients over MPI needs CPU tensors");
}

void GradSync::ready(const ag::Parameter& p) {
  if (!p.has_grad()) return;  // not reached this pass: the same on every rank
  size_t index = params_.size();
  for (size_t i = 0; i < params_.size(); ++i)
    if (&params_[i].value() == &p.value()) index = i;
  if (index == params_.size())
    throw Error(ErrorKind::Shape, "train::GradSync: " + p.name() + " is not a trained parameter");
  const Tensor& g = p.grad();
  const float* src = g.data<float>();
  const auto n = static_cast<size_t>(g.numel());
  for (size_t done = 0; done < n;) {
    if (!open_) open_bucket();
    Bucket& b = buckets_[used_ - 1];
    const size_t take = std::min(n - done, bucket_floats_ - b.data.size());
    b.data.insert(b.data.end(), src + done, src + done + take);
    b.pieces.push_back({index, done, take});
    done += take;
    if (b.data.size() == bucket_floats_) start(b);
  }
  comm_.progress();  // let the buckets already on their way advance
}

void GradSync::open_bucket() {
  if (used_ == buckets_.size()) buckets_.emplace_back();
  Bucket& b = buckets_[used_++];
  b.pieces.clear();
  b.data.clear();
  b.data.reserve(bucket_floats_);
  open_ = true;
}

void GradSync::start(Bucket& b) {
  comm_.start_sum(b.data.data(), b.data.size());
  open_ = false;
}

void GradSync::finish() {
  if (open_) start(buckets_[used_ - 1]);
  comm_.finish();
  for (size_t k = 0; k < used_; ++k) {
    const Bucket& b = buckets_[k];
    size_t at = 0;
    for (const Piece& piece : b.pieces) {
      Tensor g = params_[piece.param].grad();  // a handle on the gradient's storage
      std::memcpy(g.data<float>() + piece.offset, b.data.data() + at, piece.count * sizeof(float));
      at += piece.count;
    }
  }
  used_ = 0;
}

}  // namespace forge::train
