// The Vulkan instance, physical-device enumeration and device info (`forge devices`).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/settings.h"
#include "forge/error.h"

namespace forge::vk {
namespace {

std::atomic<uint64_t> g_validation_messages{0};

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                             VkDebugUtilsMessageTypeFlagsEXT,
                                             const VkDebugUtilsMessengerCallbackDataEXT* data,
                                             void*) {
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    ++g_validation_messages;
    std::fprintf(stderr, "vulkan validation: %s\n", data && data->pMessage ? data->pMessage : "?");
  }
  return VK_FALSE;
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

std::string kind_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu (software Vulkan)";
    default: return "other";
  }
}

std::string mib(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY (out of host memory)";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY (out of device memory)";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver)";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
  }
}

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS)
    throw Error(ErrorKind::Backend, std::string("vulkan: ") + what + " failed: " + result_name(r) +
                                        " (" + std::to_string(static_cast<int>(r)) + ")");
}

Instance& Instance::get() {
  // Created once and never destroyed: tensors in static storage may outlive any ordered
  // teardown, and the driver cleans up at process exit.
  static Instance* instance = new Instance();
  return *instance;
}

Instance::Instance() {
  auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "forge";
  app.pEngineName = "forge";
  app.apiVersion = VK_API_VERSION_1_1;
  auto ci = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ci.pApplicationInfo = &app;
  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
  if (settings().validation) {
    if (!has_layer(layer))
      throw Error(ErrorKind::Backend,
                  "vulkan: FORGE_VULKAN_VALIDATION is set but VK_LAYER_KHRONOS_validation is "
                  "not installed (apt-get install vulkan-validationlayers)");
    validation_ = true;
    ci.enabledLayerCount = 1;
    ci.ppEnabledLayerNames = &layer;
    ci.enabledExtensionCount = 1;
    ci.ppEnabledExtensionNames = &ext;
  }
  const VkResult r = vkCreateInstance(&ci, nullptr, &instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    throw Error(ErrorKind::Backend,
                "vulkan: no Vulkan device found (no driver answered; is mesa-vulkan-drivers "
                "or a GPU driver installed?)");
  check(r, "vkCreateInstance");
  if (validation_) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create) {
      auto mi = make<VkDebugUtilsMessengerCreateInfoEXT>(
          VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
      mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
      mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
      mi.pfnUserCallback = on_validation;
      check(create(instance_, &mi, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
    }
    std::fprintf(stderr, "vulkan: validation layer enabled (VK_LAYER_KHRONOS_validation)\n");
  }
  uint32_t n = 0;
  check(vkEnumeratePhysicalDevices(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
  devices_.resize(n);
  check(vkEnumeratePhysicalDevices(instance_, &n, devices_.data()), "vkEnumeratePhysicalDevices");
  devices_.resize(n);
}

uint64_t Instance::validation_messages() const { return g_validation_messages.load(); }

int Instance::default_index() const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(devices_[i], &p);
    if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) return static_cast<int>(i);
  }
  return 0;
}

DeviceInfo Instance::info(int index) const {
  VkPhysicalDevice pd = devices_.at(static_cast<size_t>(index));
  auto sub = make<VkPhysicalDeviceSubgroupProperties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto m3 = make<VkPhysicalDeviceMaintenance3Properties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  sub.pNext = &m3;
  auto p2 = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  p2.pNext = &sub;
  vkGetPhysicalDeviceProperties2(pd, &p2);
  const VkPhysicalDeviceProperties& p = p2.properties;
  const VkPhysicalDeviceLimits& l = p.limits;
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);

  DeviceInfo d;
  d.device = Device("vulkan", index);
  d.name = p.deviceName;
  d.kind = kind_name(p.deviceType);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
    if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      d.memory_bytes = std::max<uint64_t>(d.memory_bytes, mem.memoryHeaps[h].size);
  d.max_binding_bytes = l.maxStorageBufferRange;
  auto add = [&](const std::string& k, const std::string& v) { d.limits.push_back({k, v}); };
  add("api", std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." +
                 std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) + "." +
                 std::to_string(VK_API_VERSION_PATCH(p.apiVersion)));
  add("max storage buffer range",
      std::to_string(l.maxStorageBufferRange) + " (" + mib(l.maxStorageBufferRange) + ")");
  add("max allocation", mib(m3.maxMemoryAllocationSize));
  add("storage offset alignment", std::to_string(l.minStorageBufferOffsetAlignment));
  add("shared memory", std::to_string(l.maxComputeSharedMemorySize));
  add("max workgroup size", std::to_string(l.maxComputeWorkGroupSize[0]) + " x " +
                                std::to_string(l.maxComputeWorkGroupSize[1]) + " x " +
                                std::to_string(l.maxComputeWorkGroupSize[2]) + ", " +
                                std::to_string(l.maxComputeWorkGroupInvocations) + " invocations");
  add("max workgroup count", std::to_string(l.maxComputeWorkGroupCount[0]) + " x " +
                                 std::to_string(l.maxComputeWorkGroupCount[1]) + " x " +
                                 std::to_string(l.maxComputeWorkGroupCount[2]));
  add("subgroup size", std::to_string(sub.subgroupSize));
  add("push constants", std::to_string(l.maxPushConstantsSize));
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
    std::string flags;
    if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) flags += " device-local";
    for (uint32_t t = 0; t < mem.memoryTypeCount; ++t)
      if (mem.memoryTypes[t].heapIndex == h &&
          (mem.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
        flags += " host-visible";
        break;
      }
    add("memory heap " + std::to_string(h), mib(mem.memoryHeaps[h].size) + flags);
  }
  return d;
}

}  // namespace forge::vk
