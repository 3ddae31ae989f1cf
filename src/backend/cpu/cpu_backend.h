// The CPU backend: host memory, the thread pool, SIMD kernels. Reference semantics for
// every other backend, and fast. Kernels live in one file per family:
//   host_memory.cpp, cpu_backend.cpp  storage (large blocks recycled) and device info
//   matmul.cpp + gemm*.cpp         matmul, LM head (packed, register-tiled GEMM; GEMV for m=1)
//   weight_kernels.cpp + quant*.cpp  matmul and embedding with f16/bf16/q8_0/q4_0 weights
//   elementwise.cpp                add, gelu, gelu_bwd, scale, dropout, adamw, sumsq
//   rows.cpp                       softmax, layernorm (+ backward), sum_rows, argmax_rows
//   gather.cpp                     embedding, scatter_add_rows, gather_nll, ce_bwd
//   heads.cpp                      split/merge heads and their inverses
//   attention.cpp (+ _avx2/_avx512) fused causal attention (attention_loops.h: the tile)
#pragma once

#include "backend/cpu/gemm.h"
#include "backend/op_methods.h"

namespace forge::cpu {

/// Registers the kernels for weights in 16-bit and block dtypes (weight_kernels.cpp).
void add_weight_kernels(Backend& be);

/// The GEMM problem of a validated matmul call with an f32, f16 or bf16 b (matmul.cpp).
gemm::Problem matmul_problem(const Tensor& a, const Tensor& b, const Tensor& bias,
                             const MatmulSpec& spec, bool accumulate, Tensor& out);

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    add_op_methods(*this);
    add_weight_kernels(*this);
    add_kernel(Op::softmax_xent, [](Backend& b, const OpCall& c) {
      static_cast<CpuBackend&>(b).softmax_xent(c.in(0), c.out(0), c.out(1));
    });
  }
  DeviceInfo info() const override;
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  std::shared_ptr<Storage> allocate_zeros(size_t bytes) override;
  void write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) override;
  void read(const Storage& src, size_t src_offset, void* dst, size_t bytes) override;
  void copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
            size_t bytes) override;
  // Kernels finish on the calling thread: profiled by host clocks.
  void set_profiling(bool on) override { set_host_timing(on); }
  std::vector<KernelTime> kernel_times() override { return kernel_times_on_host(); }

  // The kernels, one file per family (above); registered by add_op_methods.
  FORGE_OP_METHODS
  // The fused classifier in place: gather_nll's nll, then ce_bwd's rows at scale 1 (gather.cpp).
  void softmax_xent(const Tensor& targets, Tensor& logits, Tensor& nll);
};

}  // namespace forge::cpu
