// forge/device_group.h: the free functions, dispatched to the device's backend, and the
// backend's defaults (no groups).
#include "forge/device_group.h"

#include "forge/backend.h"
#include "forge/error.h"

namespace forge {

std::string Backend::group_unavailable_reason() const {
  return info().device.str() +
         " has no groups of processes (data-parallel sums run on cuda devices, "
         "through NCCL, and on the CPU, through MPI)";
}

std::vector<uint8_t> Backend::new_group_id() {
  throw Error(ErrorKind::Unsupported, group_unavailable_reason());
}

std::unique_ptr<DeviceGroup> Backend::join_group(const std::vector<uint8_t>&, int, int) {
  throw Error(ErrorKind::Unsupported, group_unavailable_reason());
}

std::string group_unavailable_reason(Device device) {
  return backend_for(device).group_unavailable_reason();
}

std::vector<uint8_t> new_group_id(Device device) { return backend_for(device).new_group_id(); }

std::unique_ptr<DeviceGroup> join_group(Device device, const std::vector<uint8_t>& id, int rank,
                                        int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorKind::Range, "join_group: rank " + std::to_string(rank) + " of " +
                                      std::to_string(size) + " is not a rank of the group");
  return backend_for(device).join_group(id, rank, size);
}

}  // namespace forge
