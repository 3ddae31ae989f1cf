// Matrix products through cuBLASLt (libcublasLt.so.13 or .12, loaded at run time), for
// forge's row-major tensors. cuBLASLt is column-major, so out = op(a) op(b) is computed as
// out^T = op(b)^T op(a)^T: a row-major [r, c] matrix with row stride ld is the
// column-major [c, r] one with the same ld (docs/CUDA_PLAN.md, 2.3). Plans (descriptors,
// layouts and the heuristic's algorithm) are cached per shape, so a repeated product costs
// no planning and always runs the same algorithm: the same bits every time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backend/cuda/context.h"
#include "backend/cuda/memory.h"

namespace forge::cuda {

/// One product: out[b] = epilogue(alpha * op(a[b]) @ op(b[b]) + beta * out[b] + bias),
/// row-major, batch b in [0, batch), an operand's batch stride 0 when every batch shares it.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false;  // a stored [k, m], else [m, k]
  bool trans_b = false;  // b stored [n, k], else [k, n]
  int64_t stride_a = 0;  // elements between batches (0: shared)
  int64_t stride_b = 0;
  int64_t stride_out = 0;
  int64_t ld_a = 0;  // a's row stride in elements (0: its rows are packed)
  int64_t ld_b = 0;
  int64_t ld_out = 0;  // out's row stride (0: packed, n)
  bool bias = false;   // bias [n] added to every row
  bool gelu = false;   // the tanh GELU applied after the bias (not with beta != 0)
  // The products' arithmetic: fp32 operands with exact fp32 FMAs or on TF32 tensor cores, or
  // bf16 operands (the caller rounds them) on bf16 tensor cores; fp32 accumulation and an fp32
  // out every time.
  enum class Precision { fp32, tf32, bf16 } precision = Precision::fp32;

  auto key() const {
    return std::tuple(m, n, k, batch, trans_a, trans_b, stride_a, stride_b, stride_out, ld_a, ld_b,
                      ld_out, bias, gelu, precision);
  }
};

/// Whether cuBLASLt loads here (for messages; never throws).
bool cublaslt_available(std::string* why_not = nullptr);

class Gemm {
 public:
  /// Loads cuBLASLt and makes a handle and a workspace on the context's device. Throws
  /// Error(Device) when the library is missing.
  Gemm(const Context& context, Allocator& allocator);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Queues the product on the context's stream. Operands fp32, or bf16 under precision bf16;
  /// out fp32; beta 0 or 1.
  void run(const GemmShape& s, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr out,
           float alpha, float beta);

 private:
  struct Plan;
  const Plan& plan(const GemmShape& s, unsigned alignment);

  const Context& context_;
  Allocator& allocator_;
  void* handle_ = nullptr;
  CUdeviceptr workspace_ = 0;
  size_t workspace_bytes_ = 0;
  std::mutex mutex_;
  std::map<std::tuple<decltype(GemmShape{}.key()), unsigned>, std::unique_ptr<Plan>> plans_;
};

}  // namespace forge::cuda
