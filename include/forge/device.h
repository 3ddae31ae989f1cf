// Device: where a tensor's storage lives.
#pragma once

#include <string>

namespace forge {

enum class DeviceKind { Cpu, Vulkan, Cuda };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::Cpu, 0}; }
  static Device vulkan(int index = 0) { return {DeviceKind::Vulkan, index}; }

  /// Parses "cpu", "vulkan", "vulkan:1", "cuda:0". Throws Error(Format) otherwise.
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == DeviceKind::Cpu; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "vulkan:0"
};

}  // namespace forge
