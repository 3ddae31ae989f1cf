#include "forge/device.h"

#include <cctype>

#include "forge/backend.h"
#include "forge/error.h"

namespace forge {

Device Device::parse(const std::string& text) {
  auto fail = [&]() -> Device {
    throw Error(ErrorKind::Format, "device: cannot parse '" + text +
                                       "' (expected cpu, vulkan, vulkan:N, cuda or cuda:N)");
  };
  std::string name = text;
  int index = 0;
  const auto colon = text.find(':');
  if (colon != std::string::npos) {
    name = text.substr(0, colon);
    const std::string num = text.substr(colon + 1);
    if (num.empty() || num.size() > 4) return fail();
    for (char c : num)
      if (!std::isdigit(static_cast<unsigned char>(c))) return fail();
    index = std::stoi(num);
  }
  if (name == "cpu" && index == 0) return Device::cpu();
  if (name == "vulkan")
    return {DeviceKind::Vulkan, colon == std::string::npos ? default_vulkan_index() : index};
  if (name == "cuda") return {DeviceKind::Cuda, index};
  return fail();
}

std::string Device::str() const {
  switch (kind) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Vulkan: return "vulkan:" + std::to_string(index);
    case DeviceKind::Cuda: return "cuda:" + std::to_string(index);
  }
  return "?";
}

}  // namespace forge
