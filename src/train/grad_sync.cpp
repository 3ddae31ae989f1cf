// GradSync (grad_sync.h): bucketed, overlapped gradient sums for data-parallel training.
#include "train/grad_sync.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "forge/error.h"
#include "forge/run_dir.h"

namespace forge::train {
namespace {

/// The group of the job's ranks on `device`: rank 0 makes its id, the job carries it to
/// the others, and all join.
std::unique_ptr<DeviceGroup> join_job_group(dist::Comm& comm, Device device) {
  std::vector<uint8_t> id;
  uint64_t bytes = 0;
  if (comm.rank() == 0) {
    id = new_group_id(device);
    bytes = id.size();
  }
  comm.broadcast(&bytes, sizeof bytes, 0);
  if (bytes > 4096) throw Error(ErrorKind::Format, "train::GradSync: a group id of over 4 KiB");
  id.resize(bytes);
  comm.broadcast(id.data(), id.size(), 0);
  return join_group(device, id, comm.rank(), comm.size());
}

}  // namespace

GradSync::GradSync(dist::Comm& comm, const std::vector<ag::Parameter>& params, size_t bucket_bytes)
    : comm_(comm), params_(params), bucket_floats_(std::max<size_t>(1, bucket_bytes / 4)) {
  if (!params_.empty()) device_ = params_[0].value().device();
  for (const ag::Parameter& p : params_) {
    if (p.value().device() != device_)
      throw Error(ErrorKind::Device, "train::GradSync: " + p.name() + " is on " +
                                         p.value().device().str() + ", " + params_[0].name() +
                                         " on " + device_.str() + " (one device per rank)");
    if (p.value().dtype() != DType::F32)
      throw Error(ErrorKind::DType, "train::GradSync: " + p.name() + " is not F32");
  }
  if (!device_.is_cpu()) group_ = join_job_group(comm_, device_);
}

void GradSync::ready(const ag::Parameter& p) {
  if (!p.has_grad()) return;  // not reached this pass: the same on every rank
  size_t index = params_.size();
  for (size_t i = 0; i < params_.size(); ++i)
    if (&params_[i].value() == &p.value()) index = i;
  if (index == params_.size())
    throw Error(ErrorKind::Shape, "train::GradSync: " + p.name() + " is not a trained parameter");
  const Tensor& g = p.grad();
  DeviceMemory& mem = device_memory(device_);
  const auto n = static_cast<size_t>(g.numel());
  for (size_t done = 0; done < n;) {
    if (!open_) open_bucket();
    Bucket& b = buckets_[used_ - 1];
    const size_t take = std::min(n - done, bucket_floats_ - b.filled);
    mem.copy(*g.storage(), g.byte_offset() + done * 4, *b.data.storage(),
             b.data.byte_offset() + b.filled * 4, take * 4);
    b.pieces.push_back({index, done, take});
    b.filled += take;
    done += take;
    if (b.filled == bucket_floats_) start(b);
  }
  if (!group_) comm_.progress();  // let the buckets already on their way advance
}

void GradSync::open_bucket() {
  if (used_ == buckets_.size()) buckets_.emplace_back();
  Bucket& b = buckets_[used_++];
  b.pieces.clear();
  b.filled = 0;
  if (!b.data.defined())
    b.data = Tensor::empty({static_cast<int64_t>(bucket_floats_)}, DType::F32, device_);
  open_ = true;
}

void GradSync::start(Bucket& b) {
  if (group_) {
    Tensor part = b.data.narrow_rows(0, static_cast<int64_t>(b.filled));
    group_->start_sum(part);
  } else {
    comm_.start_sum(b.data.data<float>(), b.filled);
  }
  open_ = false;
}

void GradSync::finish() {
  if (open_) start(buckets_[used_ - 1]);
  if (group_)
    group_->finish();
  else
    comm_.finish();
  DeviceMemory& mem = device_memory(device_);
  for (size_t k = 0; k < used_; ++k) {
    const Bucket& b = buckets_[k];
    size_t at = 0;
    for (const Piece& piece : b.pieces) {
      const Tensor& g = params_[piece.param].grad();
      mem.copy(*b.data.storage(), b.data.byte_offset() + at * 4, *g.storage(),
               g.byte_offset() + piece.offset * 4, piece.count * 4);
      at += piece.count;
    }
  }
  used_ = 0;
  if (!timeline_path_.empty()) write_timeline();
}

void GradSync::set_timeline(const std::string& path) {
  if (!path.empty() && !group_)
    throw Error(ErrorKind::Unsupported,
                "train::GradSync: a timeline is kept for device groups (GPU gradients); CPU "
                "gradients are summed inside MPI");
  timeline_path_ = path;
  if (group_) group_->set_timeline(!path.empty());
}

void GradSync::write_timeline() {
  // Chrome's trace format: complete events ("X") for the sums, instants ("i") for the
  // compute stream's points, times in microseconds.
  nlohmann::json events = nlohmann::json::array();
  for (const GroupSpan& s : group_->timeline()) {
    nlohmann::json e = {
        {"name", s.name}, {"pid", comm_.rank()}, {"tid", s.stream}, {"ts", s.start_ms * 1e3}};
    if (s.stream == "sum") {
      e["ph"] = "X";
      e["dur"] = (s.end_ms - s.start_ms) * 1e3;
    } else {
      e["ph"] = "i";
      e["s"] = "t";
    }
    events.push_back(e);
  }
  write_file_atomic(timeline_path_, nlohmann::json{{"traceEvents", events}}.dump(1) + "\n",
                    "train::GradSync");
}

}  // namespace forge::train
