// ScopedSetting: a backend setting (forge/devices.h, set_device_setting) for a scope, such
// as a GPU's matmul_tile that a test forces on one product; the old value comes back after.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "forge/devices.h"

namespace forge::test {

class ScopedSetting {
 public:
  /// Sets `name` on `device`'s backend where it has that setting (active()); else nothing.
  ScopedSetting(Device device, std::string name, const std::string& value)
      : device_(device), name_(std::move(name)) {
    const std::vector<std::string> names = device_setting_names(device_);
    active_ = std::find(names.begin(), names.end(), name_) != names.end();
    if (!active_) return;
    old_ = device_setting(device_, name_);
    set_device_setting(device_, name_, value);
  }
  ~ScopedSetting() {
    if (active_) set_device_setting(device_, name_, old_);
  }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;
  /// Whether the device's backend has the setting.
  bool active() const { return active_; }

 private:
  Device device_;
  std::string name_;
  std::string old_;
  bool active_ = false;
};

}  // namespace forge::test
