#include "forge/device.h"

#include "forge/error.h"

namespace forge {

Device::Device(std::string_view backend, int idx) : index(idx), name_{} {
  bool ok = !backend.empty() && backend.size() <= kMaxName && idx >= 0;
  for (char c : backend) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (!ok)
    throw Error(ErrorKind::Format, "device: '" + std::string(backend) + ":" + std::to_string(idx) +
                                       "' is not a backend name (1-15 of a-z, 0-9, _) and an "
                                       "index >= 0");
  backend.copy(name_.data(), backend.size());
}

std::string Device::str() const {
  if (is_cpu() && index == 0) return "cpu";
  return std::string(backend()) + ":" + std::to_string(index);
}

}  // namespace forge
