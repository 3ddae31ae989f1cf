// The Vulkan backend: forge's kernels as GLSL compute shaders (src/backend/vulkan/shaders/)
// on any Vulkan 1.1 device, lavapipe included. Kernels record dispatches into the
// context's command buffer (see context.h); nothing runs until the host needs data.
//   vulkan_backend.cpp   storage, transfers, device registry
//   flat_kernels.cpp     elementwise kernels, AdamW, sumsq
//   matmul.cpp           matmul: tile choice, gemm, windows of operands beyond a binding
//   kernels.cpp          the other kernels: push constants, grid, shader
//   kernel_table.cpp     the kernels registered (add_op_methods, and the fused ones)
//   weight_kernels.cpp   matmul and embedding with weights in f16, bf16, q8_0, q4_0
// Tensors larger than one storage binding (maxStorageBufferRange) are bound in windows by
// the kernels that meet them: matmul, embedding, scatter_add_rows and the flat kernels
// (Context::window_elements).
#pragma once

#include <memory>
#include <vector>

#include "backend/op_methods.h"
#include "backend/vulkan/context.h"

namespace forge::vk {

/// attention_decode.comp's bindings and workgroups wanted per call.
constexpr uint32_t kAttnDecodeBindings = 6;
constexpr int64_t kAttnGroups = 256;
/// Arrival counters at the start of the work buffer (the shaders' COUNTERS): per-row ones
/// of attention_decode and argmax_rows in the first kRowCounters, gemv_chain's in the last 4.
constexpr int64_t kWorkCounters = 16384;
constexpr int64_t kRowCounters = kWorkCounters - 4;
/// gemv_chain.comp's bindings.
constexpr uint32_t kGemvChainBindings = 11;
/// gemv_n_ln's shared row (its xs[]).
constexpr int64_t kLnGemvMaxK = 2048;

/// How matmul_add_layernorm_matmul's one-dispatch chains (gemv_chain, gemv_chain_w16) run,
/// from the setting chain: auto -> on discrete GPUs only (where they are faster: lavapipe's
/// threads would poll); 1 -> on any device (CI runs them on lavapipe); 0 -> never (the op's
/// composition); solo (tests) -> chains whose second-phase workgroups never wait, each
/// computing the first phase itself.
enum class ChainMode { off, on, never_wait };
ChainMode chain_mode(bool discrete);

/// What gemv_chain's second-phase workgroups did, summed over its dispatches (modulo 2^32).
struct ChainCounts {
  uint64_t consumed = 0;    // read the first phase's x_out once every workgroup had written it
  uint64_t recomputed = 0;  // gave up waiting (or never waited: FORGE_VULKAN_CHAIN=solo) and
                            // computed x_out themselves
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(int index);
  Context& context() { return *ctx_; }
  /// The counts since the last call (finishes the queued work first), and resets them.
  ChainCounts take_chain_counts();

  DeviceInfo info() const override;
  std::string why_unsupported(Op op) const override;
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  std::shared_ptr<Storage> allocate_zeros(size_t bytes) override;
  void write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) override;
  void read(const Storage& src, size_t src_offset, void* dst, size_t bytes) override;
  void copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
            size_t bytes) override;
  void synchronize() override;
  void set_profiling(bool on) override;
  DeviceStats stats() const override {
    const Context::Stats& s = ctx_->stats();
    return {true, s.submits, s.replays, s.buffer_allocations, s.dispatches, s.reads};
  }
  /// settings.h's per-call settings (all Vulkan devices share them).
  void set_setting(const std::string& name, const std::string& value) override;
  std::string setting(const std::string& name) const override;
  std::vector<std::string> setting_names() const override;
  std::vector<KernelTime> kernel_times() override;
  /// A decode step's capture needs attention_at too.
  bool can_capture() const override {
    return ctx_->can_capture() && ctx_->max_bindings() >= kAttnDecodeBindings;
  }
  void begin_capture() override { ctx_->begin_capture(); }
  std::shared_ptr<Graph> end_capture() override { return ctx_->end_capture(); }
  void abort_capture() override { ctx_->abort_capture(); }
  void replay(const Graph& g) override;
  uint64_t read_async(const Storage& src, size_t offset, size_t bytes) override;
  void read_wait(uint64_t ticket, void* dst, size_t bytes) override {
    ctx_->read_wait(ticket, dst, bytes);
  }

  // The kernels (registered in kernel_table.cpp: every op, attention_at only on devices
  // binding kAttnDecodeBindings buffers; shapes as in forge/ops.h).
  FORGE_OP_METHODS
  /// The fused ops' kernels, and whether they take these shapes (else the ops layer
  /// composes them).
  bool takes_layernorm_matmul(const OpCall& c) const;
  bool takes_matmul_add_layernorm_matmul(const OpCall& c) const;
  void matmul_add_layernorm_matmul(const Tensor& x, const Tensor& a, const Tensor& w1,
                                   const Tensor& b1, const Tensor& gamma, const Tensor& beta,
                                   float eps, const Tensor& w2, const Tensor& b2,
                                   const MatmulSpec& spec2, Tensor& x_new, Tensor& out);
  void layernorm_matmul(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        const Tensor& w, const Tensor& bias, const MatmulSpec& spec, Tensor& out);

 private:
  void register_kernels();  // kernel_table.cpp
  /// matmul and embedding with f16 / bf16 / q8_0 / q4_0 weights (weight_kernels.cpp; the
  /// block dtypes only on devices with shaderFloat64).
  void register_weight_kernels();
  void weight_matmul(const OpCall& c);
  void weight_embedding(const OpCall& c);
  /// matmul_add_layernorm_matmul of one row with f16 / bf16 weights in one dispatch
  /// (gemv_chain_w16.comp), where takes_weight_chain says it can.
  bool takes_weight_chain(const OpCall& c) const;
  void weight_chain(const OpCall& c);
  /// n invocations of a 256-wide 1-D shader.
  void run_1d(const char* shader, const std::vector<Arg>& args, const std::vector<uint32_t>& params,
              uint64_t n);
  /// One 256-wide workgroup per row.
  void run_rows(const char* shader, const std::vector<Arg>& args,
                const std::vector<uint32_t>& params, uint64_t rows);
  /// out[c] = sum over rows r < R of x[r, c] (x: [R, C] row-major): blocks of rows summed
  /// in parallel, then the block sums in order (deterministic).
  void column_sums(const Arg& x, const Arg& out, uint64_t R, uint64_t C);
  /// Rows per block of column_sums and layernorm_bwd's parameter pass.
  uint64_t block_rows(uint64_t R) const;
  /// Records out = [out +] [gelu](alpha * op(a) @ op(b) + bias): one dispatch, or a split-k
  /// pass and its reduction. dims: M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
  /// epilogue: the shaders' flags 8 (gelu) and 16 (accumulate) or 0.
  /// With `ln` (M = 1, b not transposed, K <= kLnGemvMaxK): a's row is layer-normalized
  /// first, inside the GEMV (gemv_n_ln).
  struct LnArgs {
    Arg gamma, beta;
    float eps;
  };
  void gemm(const Arg& a, const Arg& b, const Arg* bias, const Arg& out,
            const std::vector<uint32_t>& dims, bool trans_a, bool trans_b, float alpha,
            uint32_t epilogue, uint32_t batch, uint32_t M, uint32_t N, const LnArgs* ln = nullptr);

  /// matmul's block of out and window of k (all of M, N, K when every binding fits):
  /// operands larger than one binding go in windows. A rank-2 product.
  struct Window {
    uint64_t m, n, k;
  };
  Window matmul_window(const MatmulSpec& spec, uint64_t M, uint64_t N, uint64_t K, uint64_t lda,
                       uint64_t ldb) const;

  /// attention and attention_at: the decode kernel (split keys; it binds
  /// kAttnDecodeBindings buffers) or the prefill kernel. pos_at: the position on the device.
  void attend(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache, int64_t pos,
              const Tensor* pos_at, Tensor& out);

  int index_;
  std::unique_ptr<Context> ctx_;
  // The work buffer of attention_decode.comp and argmax_rows.comp: kWorkCounters arrival
  // counters (0 between dispatches: made zeroed, reset by the kernel that counted), then
  // partial results. Kernels run one after another (it is bound writable: a barrier
  // between), so they share it. Made with the backend, so that a captured decode step
  // never needs a new one.
  std::shared_ptr<VkStorage> work_;
};

/// The backend of vulkan:index, created on first use (Error(Backend) naming the cause if
/// there is no such device).
Backend& backend(int index);
/// Every Vulkan device (empty when there is no loader, driver or device).
std::vector<DeviceInfo> device_infos();
/// "vulkan" without an index: first discrete GPU, else 0.
int default_index();

}  // namespace forge::vk
