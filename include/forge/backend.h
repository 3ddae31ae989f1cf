// Backend: the kernel table one device implements. The ops layer (src/ops/) validates
// every input and allocates outputs, then calls one of these methods; a kernel may assume
// valid, contiguous input and must fill every element of its output(s).
//
// Adding a kernel: declare it here, validate it in src/ops/, implement it in every backend,
// and add it to the cross-backend op list in tests/op_cases.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "forge/ops.h"
#include "forge/tensor.h"

namespace forge {

/// GPU time of one kernel over a profiled span (Backend::kernel_times).
struct KernelTime {
  std::string kernel;  // the kernel (Vulkan: shader) name
  uint64_t dispatches = 0;
  double ms = 0.0;  // device time between the timestamps around each dispatch
};

/// A recorded sequence of kernels (Backend::end_capture), run again by Backend::replay.
class Graph {
 public:
  virtual ~Graph() = default;
};

/// What a device can do, for `forge devices` and for code that must split buffers.
struct DeviceInfo {
  Device device;
  std::string name;                // "cpu (AMD EPYC, avx512)", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string kind;                // "cpu", "integrated-gpu", "discrete-gpu", "virtual-gpu", ...
  int threads = 0;                 // worker threads (CPU)
  uint64_t memory_bytes = 0;       // total device memory (CPU: physical RAM)
  uint64_t max_binding_bytes = 0;  // largest buffer one kernel may bind (CPU: unlimited = 0)
  std::string simd;                // CPU: "avx512", "avx2", "portable"
  /// Further limits worth showing, as (name, value) lines (Vulkan: storage buffer range,
  /// offset alignment, shared memory, workgroup size/count, subgroup size, memory heaps).
  std::vector<std::pair<std::string, std::string>> limits;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceInfo info() const = 0;
  /// Whether this device runs the op named `op` (as ops.h names it) at all. For an op it
  /// supports, a kernel throws Error(Unsupported) only for sizes past its limits (stated
  /// where it throws), never for the op itself: the op harness fails one that does.
  virtual bool supports(std::string_view op) const {
    (void)op;
    return true;
  }
  /// Uninitialized storage of `bytes` bytes on this device.
  virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;
  /// Zero-filled storage.
  virtual std::shared_ptr<Storage> allocate_zeros(size_t bytes) = 0;
  /// Host <-> device copies at byte offsets into a storage.
  virtual void write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) = 0;
  virtual void read(const Storage& src, size_t src_offset, void* dst, size_t bytes) = 0;
  /// Device-local copy between storages of this backend.
  virtual void copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
                    size_t bytes) = 0;
  /// Waits until all queued work has finished (no-op on the CPU).
  virtual void synchronize() {}
  /// Device-side timing (GPU timestamp queries), for `--profile`: set_profiling(true)
  /// starts a fresh span; kernel_times() finishes the queued work and returns the span's
  /// totals per kernel, slowest first. Backends without device timers throw
  /// Error(Unsupported) (the CPU: time its ops on the host instead).
  virtual void set_profiling(bool on);
  virtual std::vector<KernelTime> kernel_times();

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

  // --- forward kernels (shapes as in ops.h; `out` is preallocated) ---
  /// a + b; b either matches a or is a row vector [C]. out may alias a.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void gelu(const Tensor& x, Tensor& out) = 0;
  /// out = [gelu](alpha * op(a) @ op(b) + bias) (spec.gelu), or with `accumulate`
  /// out += that (matmul_add_: out holds the accumulator and is read, then written). bias may
  /// be undefined. Shapes already resolved by ops/matmul.cpp.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulSpec& spec,
                      bool accumulate, Tensor& out) = 0;
  /// out = matmul(layernorm(x, gamma, beta, eps), w, spec, bias) (ops.h layernorm_matmul;
  /// shapes resolved). The default runs layernorm into a temporary, then matmul.
  virtual void layernorm_matmul(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                const Tensor& w, const Tensor& bias, const MatmulSpec& spec,
                                Tensor& out);
  /// x_new = x + (a @ w1 + b1), out = layernorm_matmul(x_new, ...) (ops.h
  /// matmul_add_layernorm_matmul; shapes resolved, x_new and out fresh and not empty). The
  /// default copies x into x_new, runs matmul (accumulating) then layernorm_matmul.
  virtual void matmul_add_layernorm_matmul(const Tensor& x, const Tensor& a, const Tensor& w1,
                                           const Tensor& b1, const Tensor& gamma,
                                           const Tensor& beta, float eps, const Tensor& w2,
                                           const Tensor& b2, const MatmulSpec& spec2, Tensor& x_new,
                                           Tensor& out);
  virtual void softmax(const Tensor& x, bool causal, int64_t offset, Tensor& out) = 0;
  /// out: U32 [rows]; x has >= 1 column.
  virtual void argmax_rows(const Tensor& x, Tensor& out) = 0;
  virtual void layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor& out) = 0;
  /// Gathers rows [row_begin, row_begin + table.dim(0)) of a (possibly chunked) table:
  /// for every i with row_begin <= ids[i] < row_begin + V, out[i, :] = table[ids[i] -
  /// row_begin, :]; other rows of out are left untouched. Unchunked: row_begin = 0.
  virtual void embedding(const Tensor& ids, const Tensor& table, int64_t row_begin,
                         Tensor& out) = 0;
  /// Writes columns [col_begin, col_begin + chunk.dim(0)) of out ([R, Vtotal]):
  /// out[r, col_begin + j] = alpha * dot(a[r, :], chunk[j, :]).
  virtual void matmul_transb_into(const Tensor& a, const Tensor& chunk, float alpha,
                                  int64_t col_begin, Tensor& out) = 0;
  virtual void split_heads(const Tensor& qkv, int64_t n_head, int part, Tensor& out) = 0;
  virtual void merge_heads(const Tensor& x, int64_t n_head, Tensor& out) = 0;
  virtual void kv_append(Tensor& cache, const Tensor& x, int64_t pos) = 0;
  /// Fused causal attention (ops.h). k_cache/v_cache are both undefined (then pos = 0) or
  /// both [B*n_head, cap, hd] with pos + T <= cap; out: [B, T, C]; T >= 1, hd >= 1.
  virtual void attention(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                         int64_t pos, Tensor& out) = 0;
  /// attention() with caches, the position read from pos (U32 [1] on this device) and
  /// clamped to cap - T.
  virtual void attention_at(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                            const Tensor& pos, Tensor& out) = 0;

  // --- training kernels ---
  virtual void gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  virtual void softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  virtual void layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps,
                             Tensor& dx, Tensor& dgamma, Tensor& dbeta) = 0;
  virtual void sum_rows(const Tensor& x, Tensor& out) = 0;
  /// out is zero-filled by the ops layer; ids already range-checked.
  virtual void scatter_add_rows(const Tensor& ids, const Tensor& src, Tensor& out) = 0;
  virtual void gather_nll(const Tensor& logits, const Tensor& targets, Tensor& out) = 0;
  virtual void ce_bwd(const Tensor& logits, const Tensor& targets, float scale, Tensor& out) = 0;
  /// threshold = dropout_threshold(p), scale = 1 / (1 - p), both from the host.
  virtual void dropout(const Tensor& x, uint64_t seed, uint32_t threshold, float scale,
                       Tensor& out) = 0;
  virtual void unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t n_head,
                            Tensor& out) = 0;
  virtual void unmerge_heads(const Tensor& x, int64_t n_head, Tensor& out) = 0;
  virtual void sumsq(const Tensor& x, Tensor& out) = 0;
  /// out = x * s; out may alias x.
  virtual void scale(const Tensor& x, float s, Tensor& out) = 0;
  virtual void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                     const AdamWParams& p) = 0;

 private:
  // read_async()'s default: the bytes read at once, kept until read_wait().
  std::mutex early_mutex_;
  std::map<uint64_t, std::vector<unsigned char>> early_reads_;
  uint64_t last_ticket_ = 0;
};

/// The backend serving `device`; created on first use. Error(Device) if the device does not
/// exist or its backend is not built in.
Backend& backend_for(Device device);

/// The index "vulkan" (no index) stands for: the first discrete GPU, else 0 (also 0 when
/// the build has no Vulkan backend or no Vulkan device: using it then reports why).
int default_vulkan_index();

/// All devices this build can use, CPU first.
std::vector<DeviceInfo> list_devices();

}  // namespace forge
