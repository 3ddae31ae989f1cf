// The CUDA backend: forge's kernels on NVIDIA GPUs, every op in fp32. Everything of CUDA is
// loaded at run time (the driver, NVRTC for the kernels, cuBLASLt for the products), so the
// same binary runs with or without a GPU (docs/ARCHITECTURE.md, "The CUDA backend").
//   cuda_backend.cpp   storage, transfers, device registry
//   cuda_matmul.cpp    matmul through cuBLASLt
//   cuda_ops.cpp       the other kernels: grid, arguments, scratch memory
//   cuda_weights.cpp   matmul and embedding with f16, bf16, q8_0 and q4_0 weights
//   cuda_fused.cpp     layernorm_matmul and matmul_add_layernorm_matmul for decode rows
//   cuda_attention.cpp fused attention: the forward's kernels, training's backward
//   kernels/*.cu       the kernels themselves (kernels.h compiles and launches them)
// All work is queued on the context's one stream; reads wait for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/memory.h"
#include "backend/op_methods.h"

namespace forge::cuda {

class CudaBackend final : public Backend {
 public:
  /// Opens cuda:`ordinal`: its context, the kernels (compiled or from the disk cache) and
  /// cuBLASLt. Error(Device) naming what is missing.
  explicit CudaBackend(int ordinal);
  ~CudaBackend() override;

  DeviceInfo info() const override;
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  std::shared_ptr<Storage> allocate_zeros(size_t bytes) override;
  void write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) override;
  void read(const Storage& src, size_t src_offset, void* dst, size_t bytes) override;
  void copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
            size_t bytes) override;
  void synchronize() override;

  // Decode steps recorded as CUDA graphs (stream capture) and replayed.
  bool can_capture() const override { return !ctx_->profiler().on(); }
  void begin_capture() override;
  std::shared_ptr<Graph> end_capture() override;
  void abort_capture() override;
  void replay(const Graph& g) override;
  void set_profiling(bool on) override { ctx_->profiler().set_on(on); }
  std::vector<KernelTime> kernel_times() override { return ctx_->profiler().times(); }
  DeviceStats stats() const override;
  /// "precision", the matrix products' arithmetic: "fp32" (default: exact fp32 FMAs) or
  /// "tf32" (tensor cores, the fp32 operands rounded to TF32, fp32 accumulation and output)
  /// or "bf16" (each product's operands rounded to bf16 copies, bf16 tensor cores, fp32
  /// accumulation and output; products of at most 8 rows stay fp32). Every other kernel and
  /// every tensor stays fp32. Its first value comes from FORGE_CUDA_PRECISION when set (a bad
  /// value: Error(Format)).
  void set_setting(const std::string& name, const std::string& value) override;
  std::string setting(const std::string& name) const override;
  std::vector<std::string> setting_names() const override { return {"precision"}; }
  // Groups of processes (forge/device_group.h): NCCL communicators (nccl.h).
  std::string group_unavailable_reason() const override;
  std::vector<uint8_t> new_group_id() override;
  std::unique_ptr<DeviceGroup> join_group(const std::vector<uint8_t>& id, int rank,
                                          int size) override;

  Allocator& allocator() { return *allocator_; }

  FORGE_OP_METHODS
  // The fused classifier (kernels/xent.cu): nll, then the logits' gradient in place.
  void softmax_xent(const Tensor& targets, Tensor& logits, Tensor& nll);

 private:
  /// Device memory for one kernel call's intermediate values, given back when it goes out
  /// of scope (the stream orders its reuse after the call's kernels; while a step is being
  /// recorded, the graph keeps it instead).
  class Scratch {
   public:
    Scratch(CudaBackend& b, size_t bytes) : b_(b), bytes_(bytes), ptr_(b.allocator_->take(bytes)) {}
    ~Scratch() { b_.give_scratch(ptr_, bytes_); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    CUdeviceptr get() const { return ptr_; }

   private:
    CudaBackend& b_;
    size_t bytes_;
    CUdeviceptr ptr_;
  };
  void give_scratch(CUdeviceptr block, size_t bytes);

  /// A tensor's device address for a kernel; while recording, the graph keeps its storage.
  CUdeviceptr ptr(const Tensor& t);
  void keep(const CudaStorage& s);
  void check_not_capturing(const char* what) const;

  void register_weight_kernels();
  void weight_matmul(const OpCall& c);
  void weight_embedding(const OpCall& c);
  void empty_product(const Tensor& bias, bool gelu, bool accumulate, Tensor& out);
  /// x's fp32 rows rounded to bf16 in `to` (a new scratch buffer); returns its row stride.
  int64_t round_bf16(const Tensor& x, std::optional<Scratch>& to);
  void copy_rows(CUdeviceptr from, int64_t from_ld, CUdeviceptr to, int64_t to_ld, int64_t rows,
                 int64_t cols);
  /// The operands of kernels/gemv.cu beyond the shape (s.gelu picks the epilogue; res,
  /// gamma: 0 for none; a layernorm only where gemv_stages_rows and not trans_b).
  struct Gemv {
    CUdeviceptr x = 0, w = 0, bias = 0, out = 0, res = 0, gamma = 0, beta = 0;
    float alpha = 1.0f, eps = 0.0f;
    bool accumulate = false;
  };
  void gemv(const GemmShape& s, const Gemv& g);
  /// rows x K times 16-bit w [N, K] transposed (forge_gemv_w16x; gemv16_fits holds).
  void gemv16(int64_t rows, int64_t K, int64_t N, bool gelu, bool bf16, const Gemv& g);
  GemmShape matmul_shape(const Tensor& a, const Tensor& b, const Tensor& bias,
                         const MatmulSpec& spec, const Tensor& out) const;
  // The fused ops on the few-row products (cuda_fused.cpp); others compose.
  void register_fused_kernels();
  bool takes_layernorm_matmul(const OpCall& c) const;
  bool takes_matmul_add_layernorm_matmul(const OpCall& c) const;
  void layernorm_matmul(const OpCall& c);
  void fused_product(const GemmShape& s, DType w, const Gemv& g);
  void matmul_add_layernorm_matmul(const OpCall& c);
  void run_attention(const Tensor& qkv, int64_t n_head, Tensor* k_cache, Tensor* v_cache,
                     int64_t pos, const Tensor* pos_tensor, Tensor& out);
  bool takes_attention_bwd(const OpCall& c) const;
  void attention_bwd(const OpCall& c);
  void allow_shared_memory(const char* kernel, int64_t bytes, const std::string& what);

  int ordinal_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Kernels> kernels_;
  std::unique_ptr<Gemm> gemm_;
  GemmShape::Precision precision_ = GemmShape::Precision::fp32;
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> waits_{0};
  std::atomic<uint64_t> transfers_{0};     // host writes, device copies and fills queued
  std::atomic<uint64_t> work_at_wait_{0};  // work_queued() at the last wait
  uint64_t work_queued() const;
  std::atomic<uint64_t> replays_{0};
  // While recording: what the graph must keep alive (storages its kernels touch, scratch
  // blocks), handed to the graph by end_capture().
  std::atomic<bool> capturing_{false};
  std::vector<std::shared_ptr<Storage>> kept_storages_;
  std::set<const Storage*> kept_seen_;
  std::vector<std::pair<CUdeviceptr, size_t>> kept_blocks_;
  std::atomic<uint64_t> gemm_launches_{0};
  // Per kernel: the dynamic shared memory it may take now (48 KiB until raised).
  std::map<std::string, int> smem_limits_;
  int attention_smem_optin_ = 0;  // the most the device allows a block
  int multiprocessors_ = 0;       // the GPU's SMs
  // The ticket counters of forge_attention_split (one per query and head of a launch) and of
  // forge_attention_tiled64's split keys (one per query tile and head): zeroed once, left
  // zero by every launch, so a launch takes at most kTicketCounters of them.
  static constexpr int64_t kTicketCounters = 1 << 16;
  CUdeviceptr ticket_counters_ = 0;
};

/// kernels/gemv.cu's limits: at most 8 rows; rows staged in shared memory up to 40 KiB (the
/// default limit of 48 KiB per block counts the kernel's static reduction slots too).
constexpr int64_t kGemvMaxRows = 8;
constexpr int64_t kGemvStageBytes = 40 << 10;
/// Whether a product runs as kernels/gemv.cu: at most 8 rows, no batch, no trans_a, and
/// float4 weight reads (b 16-byte aligned, the weight rows a multiple of 4 floats).
bool gemv_fits(const GemmShape& s, CUdeviceptr b);
/// Whether forge_gemv_nn copies (or normalizes) the m x k rows of x into shared memory.
bool gemv_stages_rows(int64_t m, int64_t k);

/// Whether a product with 16-bit weights w [N, K] runs as forge_gemv_w16x: at most 8 rows,
/// contiguous (no trans_a), K % 8 == 0, w 16-byte aligned, the rows staged in shared memory
/// within kGemv16StageBytes.
constexpr int64_t kGemv16StageBytes = kGemvStageBytes;
bool gemv16_fits(int64_t rows, int64_t K, CUdeviceptr w, bool trans_a);

/// A tensor's device address (its storage's block plus its offset).
CUdeviceptr address(const Tensor& t);

/// The grid of the grid-stride kernels (kernels/common.cuh, FORGE_GRID_STRIDE) over n > 0
/// elements with blocks of 256 threads.
inline Dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return Dim3{static_cast<unsigned>(blocks < 65536 ? blocks : 65536)};
}

}  // namespace forge::cuda
