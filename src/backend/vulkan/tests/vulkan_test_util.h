// What the Vulkan test files share: the fixture (the first Vulkan device, or a skip naming
// why), the device's context for its counters, inputs, and a comparison against the CPU.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"
#include "ci.h"
#include "device_test_util.h"
#include "forge/devices.h"

namespace forge::test {

/// The first Vulkan device of list_devices(), or nothing.
inline bool first_vulkan(Device& out, std::string& why) {
  for (const DeviceInfo& d : list_devices())
    if (d.device.backend() == "vulkan") {
      out = d.device;
      return true;
    }
  why = "no Vulkan device on this machine (install mesa-vulkan-drivers for lavapipe)";
  return false;
}

class Vulkan : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!first_vulkan(dev_, why)) FORGE_SKIP_NO_DEVICE(why);
  }
  Device dev_;
};

inline vk::Context& context_of(Device d) {
  return dynamic_cast<vk::VulkanBackend&>(backend_for(d)).context();
}

inline std::vector<float> ramp(size_t n, float scale = 0.01f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 0.37f) * scale * 100;
  return v;
}

/// The bound of one output in expect_gpu_matches_cpu: abs + rel * |cpu value|.
struct Bound {
  double abs = 0.0;
  double rel = 0.0;
};

// run(device) computes a list of outputs; each must agree between `gpu` and the CPU within
// its bound (one per output), or all within `tol`.
inline void expect_gpu_matches_cpu(
    const std::function<std::vector<std::vector<float>>(Device)>& run, Device gpu,
    const std::vector<Bound>& bounds) {
  const auto want = run(Device::cpu());
  const auto got = run(gpu);
  ASSERT_EQ(want.size(), got.size());
  ASSERT_EQ(bounds.size(), want.size()) << "one bound per output";
  for (size_t i = 0; i < want.size(); ++i)
    expect_near(got[i], want[i], bounds[i].abs, "output " + std::to_string(i), bounds[i].rel);
}

inline void expect_gpu_matches_cpu(
    const std::function<std::vector<std::vector<float>>(Device)>& run, Device gpu, double tol) {
  const size_t outputs = run(Device::cpu()).size();
  expect_gpu_matches_cpu(run, gpu, std::vector<Bound>(outputs, Bound{tol, 0.0}));
}

}  // namespace forge::test
