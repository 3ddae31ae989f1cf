// forge/device_group.h: processes that sum tensors held on their own devices, one device
// each (NCCL on CUDA), for data-parallel training on GPUs. The group is set up through the
// job (forge/dist.h): rank 0 makes an id, every rank receives it and joins.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forge/device.h"
#include "forge/tensor.h"

namespace forge {

/// One span of a group's timeline (DeviceGroup::timeline), in milliseconds from the first
/// event recorded since the last timeline() call.
struct GroupSpan {
  std::string stream;  // "compute" (the device's queue) or "sum" (the group's own queue)
  std::string name;
  double start_ms = 0.0, end_ms = 0.0;
};

class DeviceGroup {
 public:
  virtual ~DeviceGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Queues an in-place sum of t (F32, on this group's device) across the group. It waits
  /// on the device for the work queued on t's device so far and then runs beside the work
  /// queued later, on a queue of its own: t must not be touched until finish(). Sums run
  /// in the order started; every rank starts the same sums in the same order.
  virtual void start_sum(Tensor& t) = 0;
  /// Makes the work queued on the device from now on wait for every sum started (on the
  /// device: the host does not wait).
  virtual void finish() = 0;
  /// With `on`, each start_sum and finish records device events, and timeline() returns
  /// them: per sum, "ready k" (compute: when the device reached start_sum) and "sum k"
  /// (the sum's own run), and "finish" (compute: when the device reached finish()). Waits
  /// for the device; clears the events.
  virtual void set_timeline(bool on) = 0;
  virtual std::vector<GroupSpan> timeline() = 0;
};

/// Why `device` cannot join a group ("" if it can): e.g. a backend without one, or no
/// NCCL library on this machine.
std::string group_unavailable_reason(Device device);

/// A new group's id (on one rank: the others receive it), as bytes. Error(Unsupported)
/// naming the cause when the device has no groups.
std::vector<uint8_t> new_group_id(Device device);

/// Joins the group `id` as `rank` of `size` (every rank calls it; it returns when all have
/// joined). Error(Unsupported) / Error(Backend) naming the cause.
std::unique_ptr<DeviceGroup> join_group(Device device, const std::vector<uint8_t>& id, int rank,
                                        int size);

}  // namespace forge
