// Captured graphs: a step's commands recorded once into a command buffer of their own
// (with every buffer they touch kept alive), queued again by replay, retired when the graph
// is dropped.
#include <string>

#include "backend/vulkan/context.h"
#include "forge/error.h"

namespace forge::vk {

void Context::fail_capturing(const char* what) const {
  throw Error(ErrorKind::Backend,
              std::string("vulkan: ") + what + " while a graph is being captured on " + name_);
}

void Context::keep(const VkStorage& s) {
  if (capture_seen_.insert(&s).second) capture_keep_.push_back(s.shared_from_this());
}

void Context::begin_capture() {
  mutex_.lock();  // held until end_capture / abort_capture
  try {
    if (capturing_) fail_capturing("begin_capture");
    if (!can_capture())
      throw Error(ErrorKind::Unsupported,
                  "vulkan: " + name_ +
                      " cannot capture graphs now (needs VK_KHR_push_descriptor; not while "
                      "profiling)");
    flush();
    VkCommandBuffer graph = new_command_buffer();
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    // A replay may be submitted while the one before is still running (read_async).
    bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;
    if (const VkResult r = vkBeginCommandBuffer(graph, &bi); r != VK_SUCCESS) {
      vkFreeCommandBuffers(dev_, cmd_pool_, 1, &graph);
      check(r, "vkBeginCommandBuffer");
    }
    saved_cmd_ = cmd_;
    cmd_ = graph;
    recording_ = true;
    capturing_ = true;
    commands_ = 0;
    capture_dispatches_ = 0;
    // The graph runs after whatever was submitted before it in the same batch (the host's
    // writes of its inputs): a full barrier first.
    barrier();
  } catch (...) {
    mutex_.unlock();
    throw;
  }
}

std::shared_ptr<CapturedGraph> Context::end_capture() {
  if (!capturing_) throw Error(ErrorKind::Backend, "vulkan: end_capture without begin_capture");
  barrier();  // and commands recorded after it see all its writes
  const VkCommandBuffer graph = cmd_;
  const VkResult r = vkEndCommandBuffer(graph);
  cmd_ = saved_cmd_;
  recording_ = false;
  capturing_ = false;
  touched_.clear();
  commands_ = 0;
  auto keep_list = std::move(capture_keep_);
  capture_keep_.clear();
  capture_seen_.clear();
  mutex_.unlock();
  if (r != VK_SUCCESS) {
    retire(graph);
    check(r, "vkEndCommandBuffer");
  }
  return std::make_shared<CapturedGraph>(*this, graph, std::move(keep_list), capture_dispatches_);
}

void Context::abort_capture() {
  if (!capturing_) return;
  const VkCommandBuffer graph = cmd_;
  vkEndCommandBuffer(graph);
  cmd_ = saved_cmd_;
  recording_ = false;
  capturing_ = false;
  touched_.clear();
  commands_ = 0;
  capture_keep_.clear();
  capture_seen_.clear();
  mutex_.unlock();
  retire(graph);
}

void Context::queue_recording() {
  check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
  recording_ = false;
  queued_.push_back(cmd_);
  used_.push_back(cmd_);
  if (!spare_.empty()) {
    cmd_ = spare_.back();
    spare_.pop_back();
  } else {
    cmd_ = new_command_buffer();
  }
}

void Context::replay(const CapturedGraph& g) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (capturing_) fail_capturing("a replay");
  // The batch so far goes first; recording continues in a fresh buffer after the graph.
  if (recording_) queue_recording();
  // A graph in a batch twice would need simultaneous use: submit the first one.
  if (std::find(queued_.begin(), queued_.end(), g.cmd()) != queued_.end()) flush();
  queued_.push_back(g.cmd());
  touched_.clear();  // the graph ends with a full barrier
  ++stats_.replays;
  stats_.dispatches += g.dispatches();
}

void Context::retire(VkCommandBuffer graph_cmd) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!in_flight_.empty() || std::find(queued_.begin(), queued_.end(), graph_cmd) != queued_.end())
    flush();
  vkFreeCommandBuffers(dev_, cmd_pool_, 1, &graph_cmd);
}

CapturedGraph::~CapturedGraph() { ctx_.retire(cmd_); }

}  // namespace forge::vk
