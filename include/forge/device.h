// Device: where a tensor's storage lives, a registered backend's name and a device index
// ("cpu", "name:1"). Which names exist is the backend registry's business
// (forge/devices.h: parse_device, list_devices); core knows one device only, the host
// ("cpu", index 0), where tensors made from host vectors live.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace forge {

struct Device {
  /// A backend name: 1 to 15 characters of [a-z0-9_]; Error(Format) otherwise.
  static constexpr size_t kMaxName = 15;

  Device() = default;  // the host, cpu
  Device(std::string_view backend, int index);

  static Device cpu() { return {}; }

  std::string_view backend() const { return name_.data(); }
  bool is_cpu() const { return backend() == "cpu"; }
  bool operator==(const Device& o) const { return name_ == o.name_ && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu" for the host, "name:index" for every other device.
  std::string str() const;

  int index = 0;

 private:
  std::array<char, kMaxName + 1> name_{'c', 'p', 'u', '\0'};
};

}  // namespace forge
