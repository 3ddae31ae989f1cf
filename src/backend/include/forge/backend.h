// Backend: one device's memory, queue and kernel table. The ops layer (src/ops/) validates
// every input and allocates outputs, then runs the kernel registered for the op and its
// inputs' dtypes (forge/op_table.def lists the ops); a kernel may assume valid, contiguous
// input and must fill every element of its output(s).
//
// Adding an op or a backend: docs/ARCHITECTURE.md.
#pragma once

// Internal to the engine (src/ops, src/backend, ...) and the tests: src/models, src/train and
// src/cli compile without this folder on their include path, and without this macro.
#ifndef FORGE_BACKEND_VISIBLE
#error "forge/backend.h is internal: models, training and the CLI use forge/device_queue.h"
#endif

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "forge/adamw_step.h"
#include "forge/device_group.h"
#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/op_table.h"
#include "forge/ops.h"
#include "forge/tensor.h"

namespace forge {

/// A recorded sequence of kernels (Backend::end_capture), run again by Backend::replay
/// (forge/device_queue.h: RecordedStep).
class Graph {
 public:
  virtual ~Graph() = default;
};

/// An op's attributes, for every op (op_table.def says which fields each op reads).
struct OpAttrs {
  MatmulSpec spec;          // matmul, layernorm_matmul, matmul_add_layernorm_matmul (spec2)
  MatmulSpec spec1;         // matmul_add_layernorm_matmul: w1's (trans_b only)
  bool accumulate = false;  // matmul: out += the product
  float eps = 1e-5f;        // layernorm family
  bool causal = false;      // softmax
  int64_t offset = 0;       // softmax: row i sees columns j <= i + offset
  int64_t n_head = 0;       // head ops, attention
  int part = 0;             // split_heads: 0 q, 1 k, 2 v
  int64_t pos = 0;          // attention: the first new cache row
  float scale = 1.0f;       // ce_bwd, scale, dropout (1 / (1 - p))
  uint64_t seed = 0;        // dropout
  uint64_t index0 = 0;      // dropout: x's first element's index in the mask
  uint32_t threshold = 0;   // dropout: dropout_threshold(p)
  AdamWStep adamw{};        // adamw
};

/// One kernel call: the op table's inputs and outputs in order (an absent optional tensor is
/// an undefined Tensor), shapes resolved and outputs allocated by the ops layer, which also
/// skips calls with nothing to compute.
struct OpCall {
  Op op;
  std::array<const Tensor*, kMaxOpInputs> inputs{};
  std::array<Tensor*, kMaxOpOutputs> outputs{};
  OpAttrs attrs;
  const char* function = nullptr;  // the public function that runs it (for messages)

  const Tensor& in(size_t i) const { return *inputs[i]; }
  Tensor& out(size_t i) const { return *outputs[i]; }
};

class Backend;
using Kernel = void (*)(Backend& backend, const OpCall& call);
using Accepts = bool (*)(const Backend& backend, const OpCall& call);
struct KernelEntry {
  DTypeKey key;
  Kernel run;
  Accepts accepts;  // nullptr: every call
};

class Backend : public DeviceMemory {
 public:
  virtual DeviceInfo info() const = 0;
  // Memory (allocate, allocate_zeros, read, write, copy): DeviceMemory, forge/tensor.h.
  /// Waits until all queued work has finished (no-op on the CPU).
  virtual void synchronize() {}
  /// Device-side timing (GPU timestamp queries), for `--profile`: set_profiling(true)
  /// starts a fresh span; kernel_times() finishes the queued work and returns the span's
  /// totals per kernel, slowest first. Backends without device timers throw
  /// Error(Unsupported) (the CPU: time its ops on the host instead).
  virtual void set_profiling(bool on);
  virtual std::vector<KernelTime> kernel_times();
  /// The backend's named switches (forge/devices.h, set_device_setting): change one between
  /// calls, read one, list them. The default has none: Error(Unsupported) naming the name.
  /// Counts of the device's queue (forge/device_queue.h); the default keeps none.
  virtual DeviceStats stats() const { return {}; }
  virtual void set_setting(const std::string& name, const std::string& value);
  virtual std::string setting(const std::string& name) const;
  virtual std::vector<std::string> setting_names() const { return {}; }

  // --- captured graphs (a decode step recorded once, replayed per token) ---
  /// Whether begin_capture() works now. False on the CPU (no recording to save), and on a
  /// GPU while profiling or without the features capture needs.
  virtual bool can_capture() const { return false; }
  /// The kernels called on this backend from now until end_capture() are RECORDED into a
  /// graph, not run. The graph keeps every buffer it touches alive and reuses exactly those
  /// buffers at each replay (its outputs are overwritten): values that change between
  /// replays must reach its kernels through tensors the host writes before replay(), never
  /// through kernel parameters. Host reads and writes of this device's tensors throw
  /// Error(Backend) until end_capture(); only the capturing thread may use the device.
  /// Error(Unsupported) unless can_capture().
  virtual void begin_capture();
  virtual std::shared_ptr<Graph> end_capture();
  /// Ends a capture that failed halfway; no graph.
  virtual void abort_capture();
  /// Queues the graph's kernels after the work recorded so far: no submit of its own (the
  /// next read submits everything at once).
  virtual void replay(const Graph& g);

  // --- reads that let the device run ahead of the host ---
  /// Starts the work queued so far and returns a ticket for read_wait() at once: the bytes
  /// [offset, offset + bytes) of src as that work leaves them. Work queued after it runs on
  /// without waiting for the host (a decode loop queues step n + 1 before it reads step n's
  /// token). The default reads at once.
  virtual uint64_t read_async(const Storage& src, size_t offset, size_t bytes);
  /// Waits for the work before a ticket (not for work queued after it) and copies its bytes
  /// to dst. Each ticket once, with the size read_async was given; Error(Backend) otherwise.
  virtual void read_wait(uint64_t ticket, void* dst, size_t bytes);

  /// Profiling by host clocks, for backends whose kernels finish on the calling thread (the
  /// CPU): while on, the ops layer times each kernel call and kernel_times_on_host() gives
  /// the totals per op, slowest first. A backend's set_profiling/kernel_times use them.
  bool host_timing() const { return host_timing_.load(std::memory_order_relaxed); }
  void set_host_timing(bool on);
  void add_host_time(Op op, double ms);
  std::vector<KernelTime> kernel_times_on_host();

  // --- groups of processes summing this device's tensors (forge/device_group.h) ---
  /// Why this device cannot join a group ("" if it can). The default: no groups.
  virtual std::string group_unavailable_reason() const;
  /// A new group's id; Error(Unsupported) with group_unavailable_reason() by default.
  virtual std::vector<uint8_t> new_group_id();
  /// Joins group `id` as `rank` of `size`; Error(Unsupported) by default.
  virtual std::unique_ptr<DeviceGroup> join_group(const std::vector<uint8_t>& id, int rank,
                                                  int size);

  // --- kernels: looked up in this backend's table by op and input dtypes ---
  /// Adds (or replaces) the kernel for `op` with inputs of dtypes `key` (table_key(op): the
  /// op table's own dtypes). Not thread-safe: a backend fills its table while it is built,
  /// before any op runs on it (tests that add a kernel later do so on one thread). `accepts`, when
  /// given, says per call whether the kernel takes those shapes; only fused ops may decline (the
  /// ops layer then runs their composition).
  void add_kernel(Op op, Kernel kernel, Accepts accepts = nullptr);
  void add_kernel(Op op, DTypeKey key, Kernel kernel, Accepts accepts = nullptr);
  /// The kernel for (op, key), or nullptr.
  const KernelEntry* find_kernel(Op op, DTypeKey key) const;
  /// Whether this device runs `op` with the table's dtypes, or has a kernel for `key`. For
  /// an op it supports, a kernel throws Error(Unsupported) only for sizes past its limits
  /// (stated where it throws), never for the op itself: the op harness fails one that does.
  /// A fused op without a kernel runs where every part of its composition does.
  bool supports(Op op) const {
    if (find_kernel(op, table_key(op)) != nullptr) return true;
    if (op_info(op).kind != OpKind::fused) return false;
    for (Op part : composition_parts(op))
      if (!supports(part)) return false;
    return true;
  }
  bool supports(Op op, DTypeKey key) const { return find_kernel(op, key) != nullptr; }
  /// Why this device has no kernel for `op` at all, for the Unsupported error ("" if none
  /// to tell: e.g. a GPU's attention_at on a device binding too few buffers).
  virtual std::string why_unsupported(Op op) const {
    (void)op;
    return "";
  }

 private:
  // read_async()'s default: the bytes read at once, kept until read_wait().
  std::mutex early_mutex_;
  std::map<uint64_t, std::vector<unsigned char>> early_reads_;
  uint64_t last_ticket_ = 0;
  std::atomic<bool> host_timing_{false};
  std::mutex host_times_mutex_;
  std::map<Op, KernelTime> host_times_;
  std::vector<KernelEntry> kernels_[kOpCount];  // per op, one entry per input dtype key
};

/// One backend, as it registers itself (src/backend/registry.cpp; docs/ARCHITECTURE.md, "Add
/// a backend").
struct BackendRegistration {
  std::string name;      // the device name's backend part, e.g. "cpu"
  bool indexed = false;  // devices "name:N" (else one device, "name" = "name:0")
  /// The backend of device `index`, created on first use; Error(Device) naming the cause
  /// when there is no such device.
  std::function<Backend&(int index)> open;
  /// The devices present (empty when the backend has none here: no driver, no GPU).
  std::function<std::vector<DeviceInfo>()> devices;
  /// The index "name" without one stands for (a GPU backend: its first discrete GPU).
  std::function<int()> default_index = [] { return 0; };
};

/// Adds a backend at run time (the built-in ones register at start-up): Error(Backend) if
/// its name is taken or not a valid device name. Tests register wrappers this way.
void register_backend(BackendRegistration registration);

/// The backend serving `device`; created on first use. Error(Device) if no registered
/// backend has the device.
Backend& backend_for(Device device);

}  // namespace forge
