// The Vulkan backend's storage and transfers, and the registry of Vulkan devices.
#include "backend/vulkan/vulkan_backend.h"

#include <map>
#include <mutex>

#include "backend/vulkan/settings.h"
#include "forge/error.h"

namespace forge::vk {
namespace {

const VkStorage& vk_storage(const Storage& s, const char* what) {
  const auto* v = dynamic_cast<const VkStorage*>(&s);
  if (!v)
    throw Error(ErrorKind::Device, std::string("vulkan: ") + what + ": storage on " +
                                       s.device().str() + " is not a Vulkan buffer");
  return *v;
}

}  // namespace

VulkanBackend::VulkanBackend(int index)
    : index_(index), ctx_(std::make_unique<Context>(index, Device("vulkan", index))) {
  // 1 MiB: a batch-1 GPT-2 step needs ~50 KiB of partials at once; attend() and
  // argmax_rows() split less when more would not fit.
  work_ = std::static_pointer_cast<VkStorage>(ctx_->allocate(size_t{1} << 20, true));
  register_kernels();
}

DeviceInfo VulkanBackend::info() const { return Instance::get().info(index_); }

std::shared_ptr<Storage> VulkanBackend::allocate(size_t bytes) {
  return ctx_->allocate(bytes, false);
}

std::shared_ptr<Storage> VulkanBackend::allocate_zeros(size_t bytes) {
  return ctx_->allocate(bytes, true);
}

void VulkanBackend::write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) {
  ctx_->write(vk_storage(dst, "write"), dst_offset, src, bytes);
}

void VulkanBackend::read(const Storage& src, size_t src_offset, void* dst, size_t bytes) {
  ctx_->read(vk_storage(src, "read"), src_offset, dst, bytes);
}

void VulkanBackend::copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
                         size_t bytes) {
  ctx_->copy(vk_storage(src, "copy"), src_offset, vk_storage(dst, "copy"), dst_offset, bytes);
}

uint64_t VulkanBackend::read_async(const Storage& src, size_t offset, size_t bytes) {
  return ctx_->read_async(vk_storage(src, "read_async"), offset, bytes);
}

void VulkanBackend::synchronize() {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  ctx_->flush();
}

ChainCounts VulkanBackend::take_chain_counts() {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  // gemv_chain's report words: the last two of the counter region.
  const size_t offset = static_cast<size_t>(kWorkCounters - 2) * 4;
  uint32_t words[2] = {0, 0};
  ctx_->read(*work_, offset, words, sizeof words);
  const uint32_t zeros[2] = {0, 0};
  ctx_->write(*work_, offset, zeros, sizeof zeros);
  return {words[0], words[1]};
}

void VulkanBackend::set_profiling(bool on) { ctx_->set_profiling(on); }

void VulkanBackend::set_setting(const std::string& name, const std::string& value) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());  // not between a call's dispatches
  settings().set(name, value);
}

std::string VulkanBackend::setting(const std::string& name) const { return settings().get(name); }

std::vector<std::string> VulkanBackend::setting_names() const { return Settings::names(); }

std::vector<KernelTime> VulkanBackend::kernel_times() { return ctx_->profile(); }

void VulkanBackend::replay(const Graph& g) {
  const auto* captured = dynamic_cast<const CapturedGraph*>(&g);
  if (!captured || &captured->context() != ctx_.get())
    throw Error(ErrorKind::Device, "vulkan: replay of a graph another device made");
  ctx_->replay(*captured);
}

Backend& backend(int index) {
  static std::mutex mutex;
  // Backends live until exit (tensors in static storage may outlive any teardown order).
  static auto* backends = new std::map<int, std::unique_ptr<VulkanBackend>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = backends->find(index);
  if (it != backends->end()) return *it->second;
  auto b = std::make_unique<VulkanBackend>(index);
  return *backends->emplace(index, std::move(b)).first->second;
}

std::vector<DeviceInfo> device_infos() {
  std::vector<DeviceInfo> out;
  try {
    const Instance& inst = Instance::get();
    for (size_t i = 0; i < inst.devices().size(); ++i)
      out.push_back(inst.info(static_cast<int>(i)));
  } catch (const Error&) {
    // No loader, driver or device: this build simply has no Vulkan device to list.
  }
  return out;
}

int default_index() {
  try {
    return Instance::get().default_index();
  } catch (const Error&) {
    return 0;  // using vulkan:0 will report the cause
  }
}

}  // namespace forge::vk

namespace forge {

// The one place that tells the registry about Vulkan (FORGE_BACKEND(vulkan), CMake).
BackendRegistration vulkan_backend_registration() {
  BackendRegistration r;
  r.name = "vulkan";
  r.indexed = true;
  r.open = [](int index) -> Backend& { return vk::backend(index); };
  r.devices = [] { return vk::device_infos(); };
  r.default_index = [] { return vk::default_index(); };
  return r;
}

}  // namespace forge
