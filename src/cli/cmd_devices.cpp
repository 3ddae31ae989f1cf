// forge devices [--json]: every device this build can use, with the limits code cares about.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "forge/devices.h"

namespace forge::cli {
namespace {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

int run_devices(bool json) {
  const std::vector<DeviceInfo> devices = list_devices();
  if (json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const DeviceInfo& d : devices) {
      list.push_back({{"device", d.device.str()},
                      {"name", d.name},
                      {"kind", d.kind},
                      {"threads", d.threads},
                      {"memory_bytes", d.memory_bytes},
                      {"max_binding_bytes", d.max_binding_bytes},
                      {"simd", d.simd}});
      for (const auto& [key, value] : d.limits) list.back()["limits"][key] = value;
    }
    std::printf("%s\n", nlohmann::ordered_json{{"devices", list}}.dump(2).c_str());
    return 0;
  }
  for (const DeviceInfo& d : devices) {
    std::printf("%s: %s\n", d.device.str().c_str(), d.name.c_str());
    std::printf("  kind         %s\n", d.kind.c_str());
    if (d.threads > 0) std::printf("  threads      %d\n", d.threads);
    std::printf("  memory       %s\n", human_bytes(d.memory_bytes).c_str());
    // 0 means the device imposes no per-binding limit (the CPU).
    std::printf("  max binding  %s\n",
                d.max_binding_bytes ? human_bytes(d.max_binding_bytes).c_str() : "unlimited");
    if (!d.simd.empty()) std::printf("  simd         %s\n", d.simd.c_str());
    for (const auto& [key, value] : d.limits)
      std::printf("  %-26s %s\n", key.c_str(), value.c_str());
  }
  return 0;
}

}  // namespace

void register_devices(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("devices", "List the devices this build of forge can use");
  // Parsed options must outlive register_devices: the action runs after parsing.
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON: {\"devices\": [{...}, ...]}");
  cmd->callback([&action, json] { action = [json] { return run_devices(*json); }; });
}

}  // namespace forge::cli
