// Logical device, compute queue, pipelines, descriptor sets, the recording command buffer
// with hazard barriers, submission, fences and timestamp profiling (captured graphs:
// graphs.cpp).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/settings.h"
#include "backend/vulkan/shaders.h"
#include "forge/error.h"

namespace forge::vk {
namespace {

// Submit when this many commands are recorded, so that one batch cannot grow without
// bound (a long host loop of ops with no readback).
constexpr uint32_t kMaxBatchCommands = 4096;
constexpr uint32_t kSetsPerPool = 512;
// Storage buffers per dispatch: every device has 4 (maxPerStageDescriptorStorageBuffers),
// which all generic kernels keep to; the decode-step kernels bind 5-11 (gemv_chain: 11).
constexpr uint32_t kMaxBindings = 11;
constexpr uint32_t kPushBytes = 128;  // the minimum every device supports
constexpr size_t kMaxTouched = 32;    // buffers tracked between barriers (see touched_)
// Waiting longer than this for one batch means the device is stuck: report, do not hang.
constexpr uint64_t kFenceTimeoutNs = 600ull * 1000 * 1000 * 1000;
// How long a wait polls its fence before it blocks (see spin_ns_).
constexpr uint64_t kSpinNs = 4ull * 1000 * 1000;

}  // namespace

Context::Context(int index, Device device) : device_(device) {
  Instance& inst = Instance::get();
  if (inst.devices().empty())
    throw Error(ErrorKind::Backend,
                "vulkan: no Vulkan device found (is mesa-vulkan-drivers "
                "or a GPU driver installed?)");
  if (index < 0 || index >= static_cast<int>(inst.devices().size()))
    throw Error(ErrorKind::Device, "device " + device.str() + ": there are only " +
                                       std::to_string(inst.devices().size()) +
                                       " Vulkan device(s) (see `forge devices`)");
  phys_ = inst.devices()[static_cast<size_t>(index)];
  auto m3 = make<VkPhysicalDeviceMaintenance3Properties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto p2 = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  p2.pNext = &m3;
  vkGetPhysicalDeviceProperties2(phys_, &p2);
  limits_ = p2.properties.limits;
  name_ = p2.properties.deviceName;
  max_allocation_ = m3.maxMemoryAllocationSize;
  max_bindings_ = std::min(kMaxBindings, limits_.maxPerStageDescriptorStorageBuffers);
  // Setting max_bindings (tests): act as a device binding at most that many buffers (the
  // kernels' fallbacks for devices at Vulkan's minimum of 4).
  if (settings().max_bindings > 0)
    max_bindings_ = std::clamp<uint32_t>(settings().max_bindings, 4, max_bindings_);
  if (limits_.maxComputeWorkGroupInvocations < 256 || limits_.maxPushConstantsSize < kPushBytes)
    throw Error(ErrorKind::Unsupported,
                "device " + device.str() + " (" + name_ +
                    "): forge's kernels need 256 "
                    "invocations per workgroup and 128 bytes of push constants");

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
  bool found = false;
  // Prefer a compute-only family (async compute on GPUs), else any with compute.
  for (int pass = 0; pass < 2 && !found; ++pass)
    for (uint32_t i = 0; i < nq; ++i) {
      const bool compute = qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT;
      const bool graphics = qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT;
      if (compute && (pass == 1 || !graphics)) {
        queue_family_ = i;
        found = true;
        break;
      }
    }
  if (!found)
    throw Error(ErrorKind::Unsupported,
                "device " + device.str() + " (" + name_ + "): no compute queue");
  const float priority = 1.0f;
  auto qi = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qi.queueFamilyIndex = queue_family_;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  // VK_KHR_push_descriptor (NVIDIA, AMD, Intel, lavapipe): a dispatch's bindings go into
  // the command buffer, no descriptor set to allocate and update per dispatch (the host's
  // cost per dispatch is what bounds a decode step). FORGE_VULKAN_PUSH_DESCRIPTORS=0 keeps
  // the descriptor-pool path, which devices without the extension take.
  uint32_t next = 0;
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, nullptr);
  std::vector<VkExtensionProperties> exts(next);
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, exts.data());
  const bool want_push = settings().push_descriptors;
  for (const VkExtensionProperties& e : exts)
    if (want_push && std::strcmp(e.extensionName, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0)
      push_descriptors_ = true;
  const char* enabled[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  auto di = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  di.enabledExtensionCount = push_descriptors_ ? 1 : 0;
  di.ppEnabledExtensionNames = push_descriptors_ ? enabled : nullptr;
  // shaderFloat64 where the device has it (lavapipe, NVIDIA): quantize_rows_q8 checks its
  // f32 quotients exactly in float64 (the block-weight kernels need it; weight_kernels.cpp).
  VkPhysicalDeviceFeatures have{};
  vkGetPhysicalDeviceFeatures(phys_, &have);
  VkPhysicalDeviceFeatures want{};
  want.shaderFloat64 = have.shaderFloat64;
  float64_ = have.shaderFloat64 == VK_TRUE;
  di.pEnabledFeatures = &want;
  check(vkCreateDevice(phys_, &di, nullptr, &dev_), "vkCreateDevice");
  if (push_descriptors_) {
    push_descriptor_set_ = reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(
        vkGetDeviceProcAddr(dev_, "vkCmdPushDescriptorSetKHR"));
    push_descriptors_ = push_descriptor_set_ != nullptr;
  }
  vkGetDeviceQueue(dev_, queue_family_, 0, &queue_);

  auto pi = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = queue_family_;
  check(vkCreateCommandPool(dev_, &pi, nullptr, &cmd_pool_), "vkCreateCommandPool");
  cmd_ = new_command_buffer();
  auto fi = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  check(vkCreateFence(dev_, &fi, nullptr, &fence_), "vkCreateFence");
  auto ci = make<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  check(vkCreatePipelineCache(dev_, &ci, nullptr, &pipeline_cache_), "vkCreatePipelineCache");

  // Memory types. Device buffers: device-local; when a device-local type is also
  // host-visible and coherent and its heap is as large as the largest device-local heap
  // (lavapipe, integrated GPUs), map buffers and copy directly; otherwise keep them
  // device-only and go through a staging buffer. Not on a discrete GPU even with resizable
  // BAR: host reads of its memory cross PCIe uncached, far slower than a recorded copy into
  // cached staging memory (docs/PERFORMANCE.md, "Measurements that shaped the kernels").
  const bool discrete = p2.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  discrete_ = discrete;
  // Waiting for a batch: a GPU's short batches (a decode step, ~0.5 ms) are waited for by
  // polling the fence, since a blocking vkWaitForFences wakes the thread late on NVIDIA's
  // driver (docs/PERFORMANCE.md, "Measurements that shaped the kernels").
  // Longer batches poll for at most this long, then block. lavapipe computes on the host's
  // cores, which polling would take from it: none there. Setting spin_us overrides.
  spin_ns_ = p2.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0 : kSpinNs;
  if (settings().spin_us >= 0) spin_ns_ = static_cast<uint64_t>(settings().spin_us) * 1000;
  vkGetPhysicalDeviceMemoryProperties(phys_, &mem_props_);
  uint64_t largest_local = 0;
  for (uint32_t h = 0; h < mem_props_.memoryHeapCount; ++h)
    if (mem_props_.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      largest_local = std::max<uint64_t>(largest_local, mem_props_.memoryHeaps[h].size);
  const auto flags = [&](uint32_t t) { return mem_props_.memoryTypes[t].propertyFlags; };
  const auto heap = [&](uint32_t t) {
    return mem_props_.memoryHeaps[mem_props_.memoryTypes[t].heapIndex].size;
  };
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  int local = -1, mapped = -1, staging = -1;
  for (uint32_t t = 0; t < mem_props_.memoryTypeCount; ++t) {
    const bool is_local = flags(t) & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    if (is_local && local < 0) local = static_cast<int>(t);
    if (is_local && !discrete && (flags(t) & host) == host && heap(t) >= largest_local &&
        mapped < 0)
      mapped = static_cast<int>(t);
    if ((flags(t) & host) == host &&
        (staging < 0 || (flags(t) & VK_MEMORY_PROPERTY_HOST_CACHED_BIT)))
      staging = static_cast<int>(t);
  }
  if (mapped >= 0) {
    device_type_ = static_cast<uint32_t>(mapped);
    device_mapped_ = true;
  } else if (local >= 0 && staging >= 0) {
    device_type_ = static_cast<uint32_t>(local);
    staging_type_ = static_cast<uint32_t>(staging);
  } else if (staging >= 0) {  // no device-local memory at all: host memory, mapped
    device_type_ = static_cast<uint32_t>(staging);
    device_mapped_ = true;
  } else {
    throw Error(ErrorKind::Unsupported,
                "device " + device.str() + " (" + name_ + "): no usable memory type");
  }
  // Setting staging: never map device buffers, always go through the staging buffer (how
  // discrete GPUs without resizable BAR work; lets lavapipe test that path).
  if (settings().staging && staging >= 0) {
    device_mapped_ = false;
    device_type_ = static_cast<uint32_t>(local >= 0 ? local : staging);
    staging_type_ = static_cast<uint32_t>(staging);
  }
  heap_size_ = heap(device_type_);
}

Context::~Context() {
  if (!dev_) return;
  vkDeviceWaitIdle(dev_);
  for (auto& [cls, list] : free_)
    for (const Buffer& b : list) destroy_buffer(b);
  if (staging_.buffer) destroy_buffer(staging_);
  for (auto& [name, p] : pipelines_) {
    vkDestroyPipeline(dev_, p.pipeline, nullptr);
    vkDestroyPipelineLayout(dev_, p.layout, nullptr);
    vkDestroyDescriptorSetLayout(dev_, p.set_layout, nullptr);
  }
  for (VkDescriptorPool pool : desc_pools_) vkDestroyDescriptorPool(dev_, pool, nullptr);
  vkDestroyPipelineCache(dev_, pipeline_cache_, nullptr);
  if (query_pool_) vkDestroyQueryPool(dev_, query_pool_, nullptr);
  vkDestroyFence(dev_, fence_, nullptr);
  for (const InFlight& f : in_flight_) vkDestroyFence(dev_, f.fence, nullptr);
  for (VkFence f : spare_fences_) vkDestroyFence(dev_, f, nullptr);
  for (const Buffer& b : spare_slots_) destroy_buffer(b);
  for (const auto& [ticket, r] : async_reads_) destroy_buffer(r.slot);
  vkDestroyCommandPool(dev_, cmd_pool_, nullptr);
  vkDestroyDevice(dev_, nullptr);
}

VkCommandBuffer Context::new_command_buffer() {
  auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  ai.commandPool = cmd_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  check(vkAllocateCommandBuffers(dev_, &ai, &cb), "vkAllocateCommandBuffers");
  return cb;
}

Context::Pipeline& Context::pipeline(const char* shader, uint32_t bindings) {
  auto it = pipelines_.find(shader);
  if (it != pipelines_.end()) return it->second;
  const ShaderBlob* blob = nullptr;
  for (size_t i = 0; i < kShaderCount; ++i)
    if (std::strcmp(kShaders[i].name, shader) == 0) blob = &kShaders[i];
  if (!blob) throw Error(ErrorKind::Backend, std::string("vulkan: no shader named ") + shader);

  Pipeline p;
  p.bindings = bindings;
  std::vector<VkDescriptorSetLayoutBinding> b(bindings);
  for (uint32_t i = 0; i < bindings; ++i) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  auto li =
      make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  if (push_descriptors_) li.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  li.bindingCount = bindings;
  li.pBindings = b.data();
  check(vkCreateDescriptorSetLayout(dev_, &li, nullptr, &p.set_layout),
        "vkCreateDescriptorSetLayout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  auto pli = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &p.set_layout;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &range;
  check(vkCreatePipelineLayout(dev_, &pli, nullptr, &p.layout), "vkCreatePipelineLayout");
  auto mi = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  mi.codeSize = blob->words * sizeof(uint32_t);
  mi.pCode = blob->code;
  VkShaderModule module = VK_NULL_HANDLE;
  check(vkCreateShaderModule(dev_, &mi, nullptr, &module), "vkCreateShaderModule");
  auto ci = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.layout = p.layout;
  const VkResult r = vkCreateComputePipelines(dev_, pipeline_cache_, 1, &ci, nullptr, &p.pipeline);
  vkDestroyShaderModule(dev_, module, nullptr);
  check(r, "vkCreateComputePipelines");
  return pipelines_.emplace(shader, p).first->second;
}

VkDescriptorSet Context::descriptor_set(VkDescriptorSetLayout layout) {
  if (desc_pool_used_ >= desc_pools_.size() || desc_sets_in_pool_ >= kSetsPerPool) {
    if (desc_pool_used_ < desc_pools_.size() && desc_sets_in_pool_ >= kSetsPerPool)
      ++desc_pool_used_;
    if (desc_pool_used_ >= desc_pools_.size()) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings};
      auto pi = make<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
      pi.maxSets = kSetsPerPool;
      pi.poolSizeCount = 1;
      pi.pPoolSizes = &size;
      VkDescriptorPool pool = VK_NULL_HANDLE;
      check(vkCreateDescriptorPool(dev_, &pi, nullptr, &pool), "vkCreateDescriptorPool");
      desc_pools_.push_back(pool);
      desc_pool_used_ = desc_pools_.size() - 1;
    }
    desc_sets_in_pool_ = 0;
  }
  auto ai = make<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
  ai.descriptorPool = desc_pools_[desc_pool_used_];
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vkAllocateDescriptorSets(dev_, &ai, &set), "vkAllocateDescriptorSets");
  ++desc_sets_in_pool_;
  return set;
}

VkCommandBuffer Context::begin() {
  if (!recording_) {
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
    recording_ = true;
    commands_ = 0;
    // After a batch left without a wait (read_async), hazards against its commands are no
    // longer tracked: one full barrier orders this batch after it.
    if (after_async_) {
      barrier();
      after_async_ = false;
    }
  }
  return cmd_;
}

void Context::barrier() {
  auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(cmd_, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
  touched_.clear();
}

void Context::track(const Use* uses, size_t n) {
  if (recording_ && commands_ >= kMaxBatchCommands) {
    if (capturing_) fail_capturing("more than 4096 commands in one graph");
    flush();
  }
  begin();
  // A hazard: this command reads what an earlier one wrote, or writes what it read/wrote.
  bool hazard = touched_.size() + n > kMaxTouched;
  for (size_t i = 0; i < n && !hazard; ++i)
    for (const Use& t : touched_)
      if (t.first == uses[i].first && (t.second || uses[i].second)) hazard = true;
  if (hazard) barrier();
  for (size_t i = 0; i < n; ++i) {
    auto it = std::find_if(touched_.begin(), touched_.end(),
                           [&](const Use& t) { return t.first == uses[i].first; });
    if (it == touched_.end())
      touched_.push_back(uses[i]);
    else
      it->second = it->second || uses[i].second;
  }
  ++commands_;
}

void Context::groups_1d(uint64_t n, uint32_t& gx, uint32_t& gy) const {
  const uint64_t max_x = limits_.maxComputeWorkGroupCount[0];
  const uint64_t max_y = limits_.maxComputeWorkGroupCount[1];
  if (n <= max_x) {
    gx = static_cast<uint32_t>(std::max<uint64_t>(n, 1));
    gy = 1;
    return;
  }
  const uint64_t y = (n + max_x - 1) / max_x;
  if (y > max_y)
    throw Error(ErrorKind::Unsupported,
                "vulkan: " + std::to_string(n) + " workgroups exceed the device's grid limits");
  gy = static_cast<uint32_t>(y);
  gx = static_cast<uint32_t>((n + y - 1) / y);
}

uint64_t Context::window_elements(uint64_t quantum) const {
  const uint64_t align = std::max<uint64_t>(limits_.minStorageBufferOffsetAlignment, 4);
  uint64_t range = limits_.maxStorageBufferRange;
  if (settings().window_bytes > 0)
    range = std::min<uint64_t>(range, settings().window_bytes + align);
  const uint64_t elems = range > align ? (range - align) / 4 : 0;
  return std::max<uint64_t>(quantum, elems / quantum * quantum);
}

void Context::dispatch(const char* shader, const std::vector<Arg>& args,
                       const std::vector<uint32_t>& params, uint32_t gx, uint32_t gy, uint32_t gz) {
  if (args.size() > max_bindings_ || (args.size() + params.size()) * 4 > kPushBytes)
    throw Error(ErrorKind::Backend, std::string("vulkan: ") + shader + ": too many arguments");
  if (gx == 0 || gy == 0 || gz == 0) return;
  Pipeline& p = pipeline(shader, static_cast<uint32_t>(args.size()));
  const uint64_t align = std::max<uint64_t>(limits_.minStorageBufferOffsetAlignment, 4);
  // Fixed arrays: no heap allocation per dispatch (a decode step records hundreds).
  std::array<uint32_t, kPushBytes / 4> push{};
  size_t npush = 0;
  std::array<VkDescriptorBufferInfo, kMaxBindings> infos{};
  std::array<Use, kMaxBindings> uses{};
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    const Buffer& b = a.storage->buffer();
    // Bind at the offset rounded down to the alignment; the rest is an element offset.
    const uint64_t base = a.offset / align * align;
    const uint64_t rem = a.offset - base;
    uint64_t range = std::max<uint64_t>(rem + a.bytes, 4);
    range = std::min<uint64_t>(range, b.size - base);
    if (range > limits_.maxStorageBufferRange)
      throw Error(ErrorKind::Unsupported,
                  std::string("vulkan: ") + shader + ": a binding of " + std::to_string(range) +
                      " bytes exceeds maxStorageBufferRange = " +
                      std::to_string(limits_.maxStorageBufferRange) + " of " + name_);
    infos[i] = {b.buffer, base, range};
    if (capturing_) keep(*a.storage);
    push[npush++] = static_cast<uint32_t>(rem / 4);
    uses[i] = {b.buffer, a.write};
  }
  for (uint32_t v : params) push[npush++] = v;
  track(uses.data(), args.size());
  const VkDescriptorSet set = push_descriptors_ ? VK_NULL_HANDLE : descriptor_set(p.set_layout);
  std::array<VkWriteDescriptorSet, kMaxBindings> writes{};
  for (size_t i = 0; i < args.size(); ++i) {
    writes[i] = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  if (push_descriptors_) {
    push_descriptor_set_(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0,
                         static_cast<uint32_t>(args.size()), writes.data());
  } else {
    vkUpdateDescriptorSets(dev_, static_cast<uint32_t>(args.size()), writes.data(), 0, nullptr);
    vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  }
  vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     static_cast<uint32_t>(npush * 4), push.data());
  const bool timed = profiling_ && timed_.size() * 2 + 2 <= 2 * kMaxBatchCommands;
  if (timed) {
    if (timed_.empty()) vkCmdResetQueryPool(cmd_, query_pool_, 0, 2 * kMaxBatchCommands);
    const auto q = static_cast<uint32_t>(timed_.size() * 2);
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, query_pool_, q);
    vkCmdDispatch(cmd_, gx, gy, gz);
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pool_, q + 1);
    timed_.push_back(shader);
  } else {
    vkCmdDispatch(cmd_, gx, gy, gz);
  }
  ++stats_.dispatches;
  if (capturing_) ++capture_dispatches_;
}

void Context::flush() {
  if (capturing_) fail_capturing("a submit (a host read, a wait or a long batch)");
  if (!recording_ && queued_.empty()) {
    retire_in_flight(submitted_seq_);
    return;
  }
  if (recording_) {
    check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    recording_ = false;
    queued_.push_back(cmd_);
  }
  submit(fence_);
  wait_fence(fence_);
  check(vkResetFences(dev_, 1, &fence_), "vkResetFences");
  queued_.clear();
  // A fence signals after every batch submitted before its own: those have run too.
  retire_in_flight(submitted_seq_);
  after_async_ = false;
  // The recording buffers of the batch (not the graphs'): cmd_ records on; the ones that
  // replays set aside become spares.
  check(vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
  for (VkCommandBuffer c : used_) {
    check(vkResetCommandBuffer(c, 0), "vkResetCommandBuffer");
    spare_.push_back(c);
  }
  used_.clear();
  for (VkDescriptorPool pool : desc_pools_) vkResetDescriptorPool(dev_, pool, 0);
  desc_pool_used_ = 0;
  desc_sets_in_pool_ = 0;
  touched_.clear();
  commands_ = 0;
  collect_timestamps();
  // Buffers released while the batch was in flight can go now.
  for (const Buffer& b : zombies_) destroy_buffer(b);
  zombies_.clear();
}

void Context::submit(VkFence fence) {
  auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  si.commandBufferCount = static_cast<uint32_t>(queued_.size());
  si.pCommandBuffers = queued_.data();
  check(vkQueueSubmit(queue_, 1, &si, fence), "vkQueueSubmit");
  ++stats_.submits;
}

void Context::retire_in_flight(uint64_t seq) {
  size_t n = 0;
  for (; n < in_flight_.size() && in_flight_[n].seq <= seq; ++n) {
    InFlight& f = in_flight_[n];
    wait_fence(f.fence);
    check(vkResetFences(dev_, 1, &f.fence), "vkResetFences");
    spare_fences_.push_back(f.fence);
    for (VkCommandBuffer c : f.buffers) {
      check(vkResetCommandBuffer(c, 0), "vkResetCommandBuffer");
      spare_.push_back(c);
    }
    done_seq_ = f.seq;
  }
  in_flight_.erase(in_flight_.begin(), in_flight_.begin() + static_cast<std::ptrdiff_t>(n));
  if (!pending()) {
    for (const Buffer& b : zombies_) destroy_buffer(b);
    zombies_.clear();
  }
}

void Context::wait_fence(VkFence fence) {
  if (spin_ns_ > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_);
    for (;;) {
      const VkResult s = vkGetFenceStatus(dev_, fence);
      if (s == VK_SUCCESS) return;
      if (s != VK_NOT_READY) check(s, "vkGetFenceStatus");
      if (std::chrono::steady_clock::now() >= until) break;
    }
  }
  const VkResult r = vkWaitForFences(dev_, 1, &fence, VK_TRUE, kFenceTimeoutNs);
  if (r == VK_TIMEOUT)
    throw Error(ErrorKind::Backend, "vulkan: " + name_ + " did not finish a batch of work in " +
                                        std::to_string(kFenceTimeoutNs / 1000000000) + " s");
  check(r, "vkWaitForFences");
}

// --- profiling ------------------------------------------------------------------------------

void Context::set_profiling(bool on) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  flush();
  if (on && !query_pool_) {
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
    if (qf[queue_family_].timestampValidBits == 0 || limits_.timestampPeriod <= 0.0f)
      throw Error(ErrorKind::Unsupported,
                  "vulkan: " + name_ + " has no timestamps on its compute queue (profiling)");
    auto qi = make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = 2 * kMaxBatchCommands;
    check(vkCreateQueryPool(dev_, &qi, nullptr, &query_pool_), "vkCreateQueryPool");
    timestamp_ns_ = limits_.timestampPeriod;
  }
  if (on) times_.clear();  // a fresh span
  profiling_ = on;
}

void Context::collect_timestamps() {
  if (timed_.empty()) return;
  std::vector<uint64_t> ticks(timed_.size() * 2);
  check(vkGetQueryPoolResults(dev_, query_pool_, 0, static_cast<uint32_t>(ticks.size()),
                              ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  for (size_t i = 0; i < timed_.size(); ++i) {
    KernelTime& t = times_[timed_[i]];
    t.kernel = timed_[i];
    ++t.dispatches;
    const uint64_t d = ticks[2 * i + 1] >= ticks[2 * i] ? ticks[2 * i + 1] - ticks[2 * i] : 0;
    t.ms += static_cast<double>(d) * timestamp_ns_ * 1e-6;
  }
  timed_.clear();
}

std::vector<KernelTime> Context::profile() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  flush();
  std::vector<KernelTime> out;
  for (const auto& [name, t] : times_) out.push_back(t);
  std::sort(out.begin(), out.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace forge::vk
