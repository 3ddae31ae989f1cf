// The backend registry: every backend built in registers here at start-up (the list comes
// from CMake, generated/forge_backends.inc: one FORGE_BACKEND(name) per backend), and tests
// may add more. Devices are looked up by their backend's name; nothing here names one.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "forge/backend.h"
#include "forge/devices.h"
#include "forge/error.h"

namespace forge {

// Each built-in backend defines its registration in its own folder.
#define FORGE_BACKEND(name) BackendRegistration name##_backend_registration();
#include "forge_backends.inc"
#undef FORGE_BACKEND

namespace {

struct Registry {
  std::mutex mutex;
  // Never shrinks, and entries never move (unique_ptr): a backend found once stays valid.
  std::vector<std::unique_ptr<BackendRegistration>> backends;

  Registry() {
#define FORGE_BACKEND(name) \
  backends.push_back(std::make_unique<BackendRegistration>(name##_backend_registration()));
#include "forge_backends.inc"
#undef FORGE_BACKEND
  }

  const BackendRegistration* find(std::string_view name) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& b : backends)
      if (b->name == name) return b.get();
    return nullptr;
  }

  std::vector<const BackendRegistration*> all() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<const BackendRegistration*> out;
    for (const auto& b : backends) out.push_back(b.get());
    return out;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string names_list() {
  std::string out;
  for (const std::string& n : backend_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

void register_backend(BackendRegistration r) {
  (void)Device(r.name, 0);  // Error(Format) for an invalid name
  if (!r.open || !r.devices)
    throw Error(ErrorKind::Backend, "register_backend: '" + r.name + "' lacks open or devices");
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  for (const auto& b : reg.backends)
    if (b->name == r.name)
      throw Error(ErrorKind::Backend,
                  "register_backend: a backend named '" + r.name + "' is already registered");
  reg.backends.push_back(std::make_unique<BackendRegistration>(std::move(r)));
}

Backend& backend_for(Device device) {
  const BackendRegistration* b = registry().find(device.backend());
  if (!b)
    throw Error(ErrorKind::Device, "device " + device.str() + ": this build of forge has no '" +
                                       std::string(device.backend()) + "' backend (it has " +
                                       names_list() + ")");
  if (!b->indexed && device.index != 0)
    throw Error(ErrorKind::Device, "device " + device.str() + ": backend '" + b->name +
                                       "' has one device, " + b->name);
  return b->open(device.index);
}

DeviceMemory& device_memory(Device device) { return backend_for(device); }

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  for (const BackendRegistration* b : registry().all())
    for (DeviceInfo& d : b->devices()) out.push_back(std::move(d));
  return out;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const BackendRegistration* b : registry().all()) out.push_back(b->name);
  return out;
}

std::string device_choices() {
  std::string out;
  for (const BackendRegistration* b : registry().all()) {
    if (!out.empty()) out += ", ";
    out += b->name;
    if (b->indexed) out += ", " + b->name + ":N";
  }
  return out;
}

Device parse_device(const std::string& text) {
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const BackendRegistration* b = registry().find(name);
  if (!b)
    throw Error(ErrorKind::Format,
                "device: cannot parse '" + text + "' (expected " + device_choices() + ")");
  if (colon == std::string::npos) return {b->name, b->indexed ? b->default_index() : 0};
  const std::string num = text.substr(colon + 1);
  bool digits = !num.empty() && num.size() <= 4;
  for (char c : num) digits = digits && c >= '0' && c <= '9';
  if (!digits || (!b->indexed && std::stoi(num) != 0))
    throw Error(ErrorKind::Format,
                "device: cannot parse '" + text + "' (expected " + device_choices() + ")");
  return {b->name, std::stoi(num)};
}

}  // namespace forge
