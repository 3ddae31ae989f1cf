// The Vulkan runtime under the Vulkan backend: one Context per logical device.
//
//   instance.cpp  the instance (optionally with validation layers), physical-device
//                 enumeration and the limits `forge devices` prints
//   context.cpp   logical device, compute queue, pipelines (one per shader, created once),
//                 descriptor pools, the recording command buffer with hazard barriers,
//                 submission and fences
//   memory.cpp    buffers from a size-class pool, host <-> device transfers
//
// Work is asynchronous: dispatches, copies and fills are RECORDED into one command buffer
// and submitted only when the host needs data (read, synchronize), when a large host write
// must not overtake recorded work, or when the batch grows large. A barrier goes between
// two commands only when the second touches a buffer the first wrote (or writes one it read).
// Every entry point takes the context's mutex.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "forge/backend.h"

namespace forge::vk {

/// A Vulkan struct zero-initialized with its sType set.
template <typename T>
T make(VkStructureType type) {
  T v{};
  v.sType = type;
  return v;
}

/// Throws Error(Backend) "vulkan: <what> failed: <VkResult name>" unless r is VK_SUCCESS.
void check(VkResult r, const char* what);
const char* result_name(VkResult r);

/// The process-wide instance; created on first use. Throws Error(Backend) naming the cause
/// when there is no loader, no driver or no device.
class Instance {
 public:
  static Instance& get();
  VkInstance handle() const { return instance_; }
  const std::vector<VkPhysicalDevice>& devices() const { return devices_; }
  /// "vulkan" without an index: the first discrete GPU, else device 0.
  int default_index() const;
  /// Validation messages reported so far (FORGE_VULKAN_VALIDATION=1 enables the layer).
  bool validation_enabled() const { return validation_; }
  uint64_t validation_messages() const;
  DeviceInfo info(int index) const;

 private:
  Instance();
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::vector<VkPhysicalDevice> devices_;
  bool validation_ = false;
};

/// A device buffer with its own memory allocation; `mapped` when host-visible.
struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  size_t size = 0;  // the size class (>= what was asked for)
  void* mapped = nullptr;
};

class Context;

/// Storage of a Vulkan tensor: a pooled buffer, returned to the pool on destruction.
/// (shared_from_this: a captured graph keeps alive every buffer it touches.)
class VkStorage final : public Storage, public std::enable_shared_from_this<VkStorage> {
 public:
  VkStorage(Context& ctx, Device device, size_t bytes, Buffer buffer)
      : Storage(device, bytes), ctx_(ctx), buffer_(buffer) {}
  ~VkStorage() override;
  const Buffer& buffer() const { return buffer_; }

 private:
  Context& ctx_;
  Buffer buffer_;
};

/// One buffer argument of a dispatch: the tensor's bytes [offset, offset + bytes) of a
/// storage; `write` when the kernel writes it.
struct Arg {
  const VkStorage* storage = nullptr;
  size_t offset = 0;  // bytes
  size_t bytes = 0;
  bool write = false;
};

/// A captured sequence of commands (Context::begin_capture/end_capture): its command
/// buffer, and every buffer its commands touch, kept alive for as long as the graph lives.
class CapturedGraph final : public Graph {
 public:
  CapturedGraph(Context& ctx, VkCommandBuffer cmd,
                std::vector<std::shared_ptr<const VkStorage>> keep, uint32_t dispatches)
      : ctx_(ctx), cmd_(cmd), keep_(std::move(keep)), dispatches_(dispatches) {}
  ~CapturedGraph() override;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  VkCommandBuffer cmd() const { return cmd_; }
  uint32_t dispatches() const { return dispatches_; }
  const Context& context() const { return ctx_; }

 private:
  Context& ctx_;
  VkCommandBuffer cmd_;
  std::vector<std::shared_ptr<const VkStorage>> keep_;
  uint32_t dispatches_;
};

class Context {
 public:
  Context(int index, Device device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  std::recursive_mutex& mutex() { return mutex_; }
  const VkPhysicalDeviceLimits& limits() const { return limits_; }
  Device device() const { return device_; }
  const std::string& name() const { return name_; }

  // --- memory (memory.cpp) ---
  std::shared_ptr<Storage> allocate(size_t bytes, bool zero);
  void release(const Buffer& b);  // back to the pool (from ~VkStorage)
  void write(const VkStorage& dst, size_t offset, const void* src, size_t bytes);
  void read(const VkStorage& src, size_t offset, void* dst, size_t bytes);
  void copy(const VkStorage& src, size_t src_offset, const VkStorage& dst, size_t dst_offset,
            size_t bytes);
  /// A scratch buffer for a kernel's temporaries (recycled through the pool).
  std::shared_ptr<VkStorage> scratch(size_t bytes);

  // --- recording and submission (context.cpp) ---
  /// Records one dispatch of `shader`. Push constants are the element offset of every
  /// argument within its aligned binding (in argument order), then `params`.
  void dispatch(const char* shader, const std::vector<Arg>& args,
                const std::vector<uint32_t>& params, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1);
  /// Groups for n 1-D workgroups, split as (x, y) within maxComputeWorkGroupCount.
  void groups_1d(uint64_t n, uint32_t& gx, uint32_t& gy) const;
  /// Submits the recorded work (and the graphs queued by replay) and waits for it (and for
  /// every batch submitted before it).
  void flush();
  /// Work recorded, queued or running that the host has not waited for.
  bool pending() const {
    return (recording_ && commands_ > 0) || !queued_.empty() || !in_flight_.empty();
  }

  // --- reads that do not wait for later work (memory.cpp) ---
  /// Records a copy of src's bytes [offset, offset + bytes) into host memory of its own,
  /// submits the work recorded and queued so far without waiting, and returns a ticket for
  /// read_wait(). Work recorded after it goes into the next batch, which the device runs
  /// after this one without the host in between. (Synchronous, a flush, while profiling or
  /// when the batch used pooled descriptor sets.)
  uint64_t read_async(const VkStorage& src, size_t offset, size_t bytes);
  /// Waits for the batch of `ticket` (not for later ones) and copies its bytes to dst
  /// (`bytes` must match). Each ticket once; Error(Backend) for an unknown one.
  void read_wait(uint64_t ticket, void* dst, size_t bytes);
  /// Storage buffers one dispatch may bind on this device (4 to 11).
  uint32_t max_bindings() const { return max_bindings_; }
  /// The most 4-byte elements, a multiple of `quantum`, that the kernels which split large
  /// tensors (matmul, embedding, scatter_add_rows, the flat ones: kernel_args.h) bind at
  /// once: what one binding holds at any offset (maxStorageBufferRange less the offset
  /// alignment), or at most the setting window_bytes (tests: windows of a 128 MiB limit on
  /// small tensors). At least `quantum`: a binding of more still fails in dispatch, naming
  /// the limit.
  uint64_t window_elements(uint64_t quantum) const;
  /// A discrete GPU (VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU).
  bool discrete() const { return discrete_; }
  /// shaderFloat64 is enabled (the device has it).
  bool float64() const { return float64_; }

  // --- captured graphs (context.cpp) ---
  /// begin_capture works: push descriptors (a captured dispatch's bindings live in its
  /// command buffer, not in pooled descriptor sets), and not while profiling.
  bool can_capture() const { return push_descriptors_ && !profiling_; }
  /// From now until end_capture(), dispatches, copies and fills are recorded into a
  /// command buffer of their own, to be replayed; nothing runs. Submits the work recorded
  /// so far first. Holds the context's mutex until end_capture()/abort_capture() (other
  /// threads wait). Host reads and writes throw meanwhile.
  void begin_capture();
  std::shared_ptr<CapturedGraph> end_capture();
  void abort_capture();
  bool capturing() const { return capturing_; }
  /// Queues the graph after the work recorded so far; the next flush submits both (and
  /// anything recorded after) in one vkQueueSubmit.
  void replay(const CapturedGraph& g);
  /// Called by ~CapturedGraph: waits for the graph if queued, frees its command buffer.
  void retire(VkCommandBuffer graph_cmd);

  struct Stats {
    uint64_t submits = 0;
    uint64_t dispatches = 0;
    uint64_t buffer_allocations = 0;  // vkAllocateMemory calls (pool misses)
    uint64_t replays = 0;             // captured graphs queued
    uint64_t reads = 0;               // host reads (read, read_async)
  };
  const Stats& stats() const { return stats_; }

  /// GPU time per shader from timestamp queries around every dispatch (for --profile).
  /// Enabling flushes; Error(Unsupported) if the queue has no timestamps.
  void set_profiling(bool on);
  /// Totals since profiling was enabled, by shader name (flushes first).
  std::vector<KernelTime> profile();

 private:
  struct Pipeline {
    VkPipeline pipeline = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    uint32_t bindings = 0;
  };
  Pipeline& pipeline(const char* shader, uint32_t bindings);
  VkDescriptorSet descriptor_set(VkDescriptorSetLayout layout);
  VkCommandBuffer begin();
  /// A primary command buffer from the context's pool (the recording one, a graph's).
  VkCommandBuffer new_command_buffer();
  /// Hazard tracking: a barrier before a command that touches what is pending.
  /// (buffer, written) pairs of one command.
  using Use = std::pair<VkBuffer, bool>;
  void track(const Use* uses, size_t n);
  void track(std::initializer_list<Use> uses) { track(uses.begin(), uses.size()); }
  void barrier();
  /// Ends the recording command buffer and queues it (to be recycled after its batch);
  /// recording goes on in a spare or new one.
  void queue_recording();
  /// Submits queued_ with `fence` (VK_NULL_HANDLE: none).
  void submit(VkFence fence);
  /// Waits for the batches in flight up to sequence number `seq` and recycles their
  /// command buffers and fences.
  void retire_in_flight(uint64_t seq);
  /// Waits until `fence` signals: polls it for up to spin_ns_, then blocks (Error(Backend)
  /// after kFenceTimeoutNs: a stuck device).
  void wait_fence(VkFence fence);
  /// During a capture: the graph keeps `s` alive.
  void keep(const VkStorage& s);
  [[noreturn]] void fail_capturing(const char* what) const;

  Buffer create_buffer(size_t size, uint32_t type, bool map);
  void destroy_buffer(const Buffer& b);
  void staged_read(const Buffer& src, size_t offset, void* dst, size_t bytes);
  void staged_write(const Buffer& dst, size_t offset, const void* src, size_t bytes);
  Buffer& staging();

  std::recursive_mutex mutex_;
  Device device_;
  std::string name_;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkPhysicalDeviceLimits limits_{};
  VkPhysicalDeviceMemoryProperties mem_props_{};
  uint64_t max_allocation_ = 0;
  VkDevice dev_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
  bool recording_ = false;
  // Ended command buffers waiting for the next flush, in submission order (the batch before
  // a replay, then the graph's), and the recording buffers among them to reset after it.
  std::vector<VkCommandBuffer> queued_, used_, spare_;
  bool capturing_ = false;
  VkCommandBuffer saved_cmd_ = VK_NULL_HANDLE;  // the recording buffer during a capture
  std::vector<std::shared_ptr<const VkStorage>> capture_keep_;
  std::unordered_set<const VkStorage*> capture_seen_;
  uint32_t capture_dispatches_ = 0;
  uint32_t max_bindings_ = 4;
  bool discrete_ = false;
  bool float64_ = false;
  uint64_t spin_ns_ = 0;           // how long wait_fence polls before it blocks
  bool push_descriptors_ = false;  // VK_KHR_push_descriptor enabled
  PFN_vkCmdPushDescriptorSetKHR push_descriptor_set_ = nullptr;
  uint32_t commands_ = 0;
  // Batches submitted by read_async() and not waited for yet, oldest first: each with its
  // fence and the recording command buffers to recycle once it has run.
  struct InFlight {
    uint64_t seq = 0;
    VkFence fence = VK_NULL_HANDLE;
    std::vector<VkCommandBuffer> buffers;
  };
  std::vector<InFlight> in_flight_;
  std::vector<VkFence> spare_fences_;
  uint64_t submitted_seq_ = 0;  // batches submitted by read_async() so far
  uint64_t done_seq_ = 0;       // every batch up to this one has run
  bool after_async_ = false;    // the next recording starts with a barrier (see begin())
  // read_async() tickets: the host-visible buffer the bytes went to and their batch.
  struct AsyncRead {
    Buffer slot;
    size_t bytes = 0;
    uint64_t seq = 0;
  };
  std::map<uint64_t, AsyncRead> async_reads_;
  std::vector<Buffer> spare_slots_;  // host-visible buffers of kSlotBytes for small reads
  uint64_t last_ticket_ = 0;
  // Looked up by the shader's name as a string_view (no std::string built per dispatch).
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Pipeline, NameHash, std::equal_to<>> pipelines_;
  std::vector<VkDescriptorPool> desc_pools_;
  size_t desc_pool_used_ = 0;  // index of the pool being filled
  uint32_t desc_sets_in_pool_ = 0;
  // Buffers touched since the last barrier and whether written: a short list searched
  // linearly (a chain of dependent kernels puts a barrier every few commands; a barrier is
  // also recorded when the list grows long, which is always correct).
  std::vector<Use> touched_;

  // Memory: a type for device buffers, whether it is host-visible (then buffers are mapped
  // and the host copies directly), a host-visible type for staging otherwise.
  uint32_t device_type_ = 0;
  bool device_mapped_ = false;
  uint32_t staging_type_ = 0;
  uint64_t heap_size_ = 0;
  Buffer staging_;
  std::map<size_t, std::vector<Buffer>> free_;  // size class -> idle buffers
  std::vector<Buffer> zombies_;                 // to destroy once the batch in flight has finished
  size_t cached_bytes_ = 0;
  Stats stats_;

  // Profiling: a query pool of two timestamps per dispatch of one batch, the shader of each
  // pair, and the totals.
  VkQueryPool query_pool_ = VK_NULL_HANDLE;
  bool profiling_ = false;
  double timestamp_ns_ = 1.0;
  std::vector<std::string> timed_;
  std::map<std::string, KernelTime> times_;
  void collect_timestamps();
};

}  // namespace forge::vk
