// Device buffers from a size-class pool, and host <-> device transfers.
//
// Size classes: powers of two up to 4 KiB, then quarter steps between powers of two (at
// most 25% slack). A released buffer goes back to its class's free list and is handed out
// again by the next allocation of that class, so a steady loop (decode, training steps)
// allocates no device memory after its first iteration. Released buffers may still be read
// by recorded work: that is safe, because their next use is recorded after it (ordered by
// the hazard barriers) and the host touches a buffer only after a flush.
#include <algorithm>
#include <cstring>
#include <string>

#include "backend/vulkan/context.h"
#include "forge/error.h"

namespace forge::vk {
namespace {

constexpr size_t kMinBuffer = 256;
constexpr size_t kUpdateMax = 65536;           // vkCmdUpdateBuffer's limit
constexpr size_t kStagingBytes = 64ull << 20;  // transfers go in chunks of this size
constexpr size_t kSlotBytes = 4096;            // read_async() buffers kept for reuse

size_t size_class(size_t n) {
  n = std::max(n, kMinBuffer);
  size_t p = 1;
  while (p * 2 <= n) p *= 2;
  if (p == n) return n;
  if (n <= 4096) return p * 2;
  const size_t step = p / 4;
  return (n + step - 1) / step * step;
}

}  // namespace

VkStorage::~VkStorage() {
  std::lock_guard<std::recursive_mutex> lock(ctx_.mutex());
  ctx_.release(buffer_);
}

Buffer Context::create_buffer(size_t size, uint32_t type, bool map) {
  Buffer b;
  b.size = size;
  auto bi = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(dev_, &bi, nullptr, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev_, b.buffer, &req);
  if (!(req.memoryTypeBits & (1u << type))) {
    vkDestroyBuffer(dev_, b.buffer, nullptr);
    throw Error(ErrorKind::Backend,
                "vulkan: the chosen memory type cannot hold buffers on " + name_);
  }
  auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  const VkResult r = vkAllocateMemory(dev_, &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(dev_, b.buffer, nullptr);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      throw Error(ErrorKind::Backend, "vulkan: out of device memory allocating " +
                                          std::to_string(size) + " bytes on " + device_.str() +
                                          " (" + name_ + ")");
    check(r, "vkAllocateMemory");
  }
  ++stats_.buffer_allocations;
  const VkResult rb = vkBindBufferMemory(dev_, b.buffer, b.memory, 0);
  if (rb == VK_SUCCESS && map) {
    const VkResult rm = vkMapMemory(dev_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped);
    if (rm != VK_SUCCESS) {
      destroy_buffer(b);
      check(rm, "vkMapMemory");
    }
  }
  if (rb != VK_SUCCESS) {
    destroy_buffer(b);
    check(rb, "vkBindBufferMemory");
  }
  return b;
}

void Context::destroy_buffer(const Buffer& b) {
  if (b.mapped) vkUnmapMemory(dev_, b.memory);
  vkDestroyBuffer(dev_, b.buffer, nullptr);
  vkFreeMemory(dev_, b.memory, nullptr);
}

std::shared_ptr<Storage> Context::allocate(size_t bytes, bool zero) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const size_t cls = size_class(bytes);
  if (cls < bytes || cls > max_allocation_ || cls > heap_size_)
    throw Error(ErrorKind::Backend,
                "vulkan: out of device memory: cannot allocate " + std::to_string(bytes) +
                    " bytes on " + device_.str() + " (" + name_ + ": largest allocation " +
                    std::to_string(std::min<uint64_t>(max_allocation_, heap_size_)) + " bytes)");
  Buffer b;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    b = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= cls;
  } else {
    try {
      b = create_buffer(cls, device_type_, device_mapped_);
    } catch (const Error&) {
      // Out of memory: give the pool's idle buffers back to the driver, then try once more.
      flush();
      for (auto& [c, list] : free_)
        for (const Buffer& f : list) destroy_buffer(f);
      free_.clear();
      cached_bytes_ = 0;
      b = create_buffer(cls, device_type_, device_mapped_);
    }
  }
  auto storage = std::make_shared<VkStorage>(*this, device_, bytes, b);
  if (zero) {
    if (b.mapped && !pending() && !capturing_) {
      std::memset(b.mapped, 0, b.size);
    } else {
      track({{b.buffer, true}});
      vkCmdFillBuffer(cmd_, b.buffer, 0, VK_WHOLE_SIZE, 0);
      if (capturing_) keep(*storage);  // zeroed again at every replay
    }
  }
  return storage;
}

std::shared_ptr<VkStorage> Context::scratch(size_t bytes) {
  return std::static_pointer_cast<VkStorage>(allocate(bytes, false));
}

void Context::release(const Buffer& b) {
  // Keep idle buffers up to half the heap; beyond that, free them once the work in flight
  // that may use them has finished.
  if (cached_bytes_ + b.size <= heap_size_ / 2) {
    free_[b.size].push_back(b);
    cached_bytes_ += b.size;
  } else {
    zombies_.push_back(b);
    if (!pending()) {
      for (const Buffer& z : zombies_) destroy_buffer(z);
      zombies_.clear();
    }
  }
}

Buffer& Context::staging() {
  if (!staging_.buffer) staging_ = create_buffer(kStagingBytes, staging_type_, true);
  return staging_;
}

void Context::staged_read(const Buffer& src, size_t offset, void* dst, size_t bytes) {
  Buffer& st = staging();
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t done = 0; done < bytes; done += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    track({{src.buffer, false}, {st.buffer, true}});
    VkBufferCopy region{offset + done, 0, n};
    vkCmdCopyBuffer(cmd_, src.buffer, st.buffer, 1, &region);
    flush();
    std::memcpy(out + done, st.mapped, n);
  }
}

void Context::staged_write(const Buffer& dst, size_t offset, const void* src, size_t bytes) {
  Buffer& st = staging();
  const auto* in = static_cast<const unsigned char*>(src);
  for (size_t done = 0; done < bytes; done += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    flush();  // the staging buffer may still feed a recorded copy
    std::memcpy(st.mapped, in + done, n);
    track({{st.buffer, false}, {dst.buffer, true}});
    VkBufferCopy region{0, offset + done, n};
    vkCmdCopyBuffer(cmd_, st.buffer, dst.buffer, 1, &region);
  }
  flush();
}

void Context::write(const VkStorage& dst, size_t offset, const void* src, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (capturing_) fail_capturing("a host write");
  if (bytes == 0) return;
  const Buffer& b = dst.buffer();
  if (b.mapped && !pending()) {
    std::memcpy(static_cast<unsigned char*>(b.mapped) + offset, src, bytes);
    return;
  }
  if (bytes <= kUpdateMax && offset % 4 == 0 && bytes % 4 == 0) {
    // Small writes go into the command stream, in order with the recorded work.
    track({{b.buffer, true}});
    vkCmdUpdateBuffer(cmd_, b.buffer, offset, bytes, src);
    return;
  }
  if (b.mapped) {
    flush();
    std::memcpy(static_cast<unsigned char*>(b.mapped) + offset, src, bytes);
    return;
  }
  staged_write(b, offset, src, bytes);
}

void Context::read(const VkStorage& src, size_t offset, void* dst, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (capturing_) fail_capturing("a host read");
  if (bytes == 0) return;
  ++stats_.reads;
  const Buffer& b = src.buffer();
  if (b.mapped) {
    flush();
    std::memcpy(dst, static_cast<const unsigned char*>(b.mapped) + offset, bytes);
    return;
  }
  // The copy into the staging buffer joins the recorded batch: still one submit.
  staged_read(b, offset, dst, bytes);
}

uint64_t Context::read_async(const VkStorage& src, size_t offset, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (capturing_) fail_capturing("a host read");
  AsyncRead r;
  r.bytes = bytes;
  ++stats_.reads;
  const uint32_t type = device_mapped_ ? device_type_ : staging_type_;
  if (bytes <= kSlotBytes && !spare_slots_.empty()) {
    r.slot = spare_slots_.back();
    spare_slots_.pop_back();
  } else {
    r.slot = create_buffer(bytes <= kSlotBytes ? kSlotBytes : size_class(bytes), type, true);
  }
  if (bytes > 0) {
    track({{src.buffer().buffer, false}, {r.slot.buffer, true}});
    VkBufferCopy region{offset, 0, bytes};
    vkCmdCopyBuffer(cmd_, src.buffer().buffer, r.slot.buffer, 1, &region);
    // The host reads the slot once the batch's fence has signalled.
    auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                         &mb, 0, nullptr, 0, nullptr);
  }
  // Descriptor sets come from pools reset at a flush, and timestamps are read there: those
  // batches are waited for now.
  if (profiling_ || desc_pool_used_ > 0 || desc_sets_in_pool_ > 0) {
    flush();
  } else if (recording_ || !queued_.empty()) {
    if (recording_) queue_recording();
    VkFence fence = VK_NULL_HANDLE;
    if (!spare_fences_.empty()) {
      fence = spare_fences_.back();
      spare_fences_.pop_back();
    } else {
      auto fi = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
      check(vkCreateFence(dev_, &fi, nullptr, &fence), "vkCreateFence");
    }
    try {
      submit(fence);
    } catch (...) {
      spare_fences_.push_back(fence);
      throw;
    }
    in_flight_.push_back({++submitted_seq_, fence, std::move(used_)});
    used_.clear();
    queued_.clear();
    touched_.clear();
    commands_ = 0;
    after_async_ = true;
  }
  r.seq = submitted_seq_;
  async_reads_.emplace(++last_ticket_, r);
  return last_ticket_;
}

void Context::read_wait(uint64_t ticket, void* dst, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto it = async_reads_.find(ticket);
  if (it == async_reads_.end() || it->second.bytes != bytes)
    throw Error(ErrorKind::Backend,
                "vulkan: read_wait of ticket " + std::to_string(ticket) +
                    (it == async_reads_.end() ? ", which is not pending" : " with another size"));
  const AsyncRead r = it->second;
  async_reads_.erase(it);
  try {
    if (r.seq > done_seq_) retire_in_flight(r.seq);
  } catch (...) {
    destroy_buffer(r.slot);
    throw;
  }
  if (bytes > 0) std::memcpy(dst, r.slot.mapped, bytes);
  if (r.slot.size == kSlotBytes)
    spare_slots_.push_back(r.slot);
  else
    destroy_buffer(r.slot);
}

void Context::copy(const VkStorage& src, size_t src_offset, const VkStorage& dst, size_t dst_offset,
                   size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (bytes == 0) return;
  const Buffer& s = src.buffer();
  const Buffer& d = dst.buffer();
  const bool overlap =
      s.buffer == d.buffer && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes;
  if (overlap) {  // vkCmdCopyBuffer forbids overlapping regions: go through a temporary
    auto tmp = scratch(bytes);
    copy(src, src_offset, *tmp, 0, bytes);
    copy(*tmp, 0, dst, dst_offset, bytes);
    return;
  }
  if (capturing_) {
    keep(src);
    keep(dst);
  }
  track({{s.buffer, false}, {d.buffer, true}});
  VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(cmd_, s.buffer, d.buffer, 1, &region);
}

}  // namespace forge::vk
