// The Vulkan backend's switches, in one place: each is read from FORGE_VULKAN_<NAME> once,
// at the backend's first use, and validated there (a bad value: Error(Format) naming the
// variable and what it takes). Tests and sweeps change the per-call ones between calls
// through forge::set_device_setting (devices.h), by the lower-case name.
//
//   name              variable                       values                      read
//   validation        FORGE_VULKAN_VALIDATION        0 | 1                       at instance
//   creation max_bindings      FORGE_VULKAN_MAX_BINDINGS      auto | 4..11                at device
//   creation push_descriptors  FORGE_VULKAN_PUSH_DESCRIPTORS  auto | 0                    at device
//   creation staging           FORGE_VULKAN_STAGING           0 | 1                       at device
//   creation spin_us           FORGE_VULKAN_SPIN_US           auto | 0..1000000           at device
//   creation chain             FORGE_VULKAN_CHAIN             auto | 0 | 1 | solo         per call
//   matmul_tile       FORGE_VULKAN_MATMUL_TILE       auto | 128x128 | 64x128 | 128x64 | 64x64
//   split_k           FORGE_VULKAN_SPLIT_K           auto | 1..65535             per call
//   attention_tile    FORGE_VULKAN_ATTENTION_TILE    auto | small | big          per call
//   attention_splits  FORGE_VULKAN_ATTENTION_SPLITS  auto | 1..65535             per call
//   window_bytes      FORGE_VULKAN_WINDOW_BYTES      auto | 4..2^32              per call
// What each does: docs/ARCHITECTURE.md, "Vulkan backend".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace forge::vk {

struct Settings {
  // At instance / device creation.
  bool validation = false;       // enable VK_LAYER_KHRONOS_validation (tests)
  uint32_t max_bindings = 0;     // 0: the device's; else act as a device binding this many
  bool push_descriptors = true;  // false: descriptor pools, as devices without the extension
  bool staging = false;          // every host transfer through the staging buffer
  int64_t spin_us = -1;          // -1: the device type's default; how long a wait polls
  // Per kernel call.
  enum class Chain { automatic, off, on, solo };
  Chain chain = Chain::automatic;    // gemv_chain: discrete GPUs only, never, always, never waiting
  std::string matmul_tile = "auto";  // force a tile kernel on the big products
  uint64_t split_k = 0;              // 0: gemm's choice; else splits of k where possible
  std::string attention_tile = "auto";  // the prefill kernel (auto is small)
  int64_t attention_splits = 0;         // 0: attend's choice; else workgroups per query
  uint64_t window_bytes = 0;            // 0: the binding limit; else at most this per window

  /// Defaults overridden by every FORGE_VULKAN_* variable that is set.
  static Settings from_environment();
  /// Changes the per-call setting `name` (Error(Format) for a bad value; Error(Unsupported)
  /// for a name that is not a setting or is read only at creation).
  void set(std::string_view name, std::string_view value);
  /// The value of `name` as set() takes it.
  std::string get(std::string_view name) const;
  /// Every setting's name, in the table's order.
  static std::vector<std::string> names();
};

/// The process's settings: from the environment at the first call, then changed only by
/// Settings::set. Set them between kernel calls, never while another thread records.
Settings& settings();

}  // namespace forge::vk
