// Maps devices to their backends. Backends are created lazily, once, and live until exit.
#include <memory>
#include <mutex>

#include "backend/cpu/cpu_backend.h"
#include "forge/backend.h"
#include "forge/error.h"

namespace forge {

Backend& backend_for(Device device) {
  switch (device.kind) {
    case DeviceKind::Cpu: {
      static cpu::CpuBackend cpu_backend;
      return cpu_backend;
    }
    case DeviceKind::Vulkan:
      throw Error(ErrorKind::Device, "device " + device.str() +
                                         ": this build of forge has no Vulkan backend");
    case DeviceKind::Cuda:
      throw Error(ErrorKind::Device, "device " + device.str() +
                                         ": this build of forge has no CUDA backend");
  }
  throw Error(ErrorKind::Device, "device: unknown kind");
}

std::vector<DeviceInfo> list_devices() { return {backend_for(Device::cpu()).info()}; }

}  // namespace forge
