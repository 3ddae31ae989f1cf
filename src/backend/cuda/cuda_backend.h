// The CUDA backend: forge's kernels on NVIDIA GPUs, every op in fp32. Everything of CUDA is
// loaded at run time (the driver, NVRTC for the kernels, cuBLASLt for the products), so the
// same binary runs with or without a GPU (docs/ARCHITECTURE.md, "The CUDA backend").
//   cuda_backend.cpp   storage, transfers, device registry
//   cuda_matmul.cpp    matmul through cuBLASLt
//   cuda_ops.cpp       the other kernels: grid, arguments, scratch memory
//   cuda_weights.cpp   matmul and embedding with f16, bf16, q8_0 and q4_0 weights
//   kernels/*.cu       the kernels themselves (kernels.h compiles and launches them)
// All work is queued on the context's one stream; reads wait for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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
  /// "tf32" (tensor cores, the fp32 operands rounded to TF32, fp32 accumulation and output);
  /// "bf16" is refused (Error(Unsupported)) until bf16 operands exist. Every other kernel
  /// stays fp32. Its first value comes from FORGE_CUDA_PRECISION when set (a bad value:
  /// Error(Format)).
  void set_setting(const std::string& name, const std::string& value) override;
  std::string setting(const std::string& name) const override;
  std::vector<std::string> setting_names() const override { return {"precision"}; }

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
  void run_attention(const Tensor& qkv, int64_t n_head, Tensor* k_cache, Tensor* v_cache,
                     int64_t pos, const Tensor* pos_tensor, Tensor& out);
  void allow_shared_memory(const char* kernel, int64_t bytes, int& limit, const std::string& what);

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
  int attention_smem_limit_ = 0;  // bytes of dynamic shared memory forge_attention may use now
  int attention_tiled_smem_limit_ = 48 << 10;  // the same for forge_attention_tiled
  int attention_smem_optin_ = 0;               // the most the device allows a block
};

/// A tensor's device address (its storage's block plus its offset).
CUdeviceptr address(const Tensor& t);

/// The grid of the grid-stride kernels (kernels/common.cuh, FORGE_GRID_STRIDE) over n > 0
/// elements with blocks of 256 threads.
inline Dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return Dim3{static_cast<unsigned>(blocks < 65536 ? blocks : 65536)};
}

}  // namespace forge::cuda
