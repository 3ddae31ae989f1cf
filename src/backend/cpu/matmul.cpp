// matmul kernels on the CPU: translate the validated tensors into a gemm::Problem (strides,
// layouts, the b_rows cut) and hand it to the GEMM engine (gemm.h).
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"

namespace forge::cpu {

// a: [M, K] | [B, M, K] (trans_a: [K, M] | [B, K, M]); b: [K, N] | [B, K, N] (trans_b:
// [N, K] | [B, N, K]), of which only the first b_rows stored rows are used when b_rows > 0;
// out: [M, N] | [B, M, N] (read first with accumulate). Shapes were validated by
// ops/matmul.cpp.
gemm::Problem matmul_problem(const Tensor& a, const Tensor& b, const Tensor& bias,
                             const MatmulSpec& spec, bool accumulate, Tensor& out) {
  gemm::Problem p;
  p.batch = out.rank() == 3 ? out.dim(0) : 1;
  p.M = out.dim(-2);
  p.N = out.dim(-1);
  p.K = spec.trans_a ? a.dim(-2) : a.dim(-1);
  p.a = a.data<float>();
  p.lda = a.dim(-1);
  p.stride_a = a.rank() == 3 ? a.dim(-2) * a.dim(-1) : 0;
  p.trans_a = spec.trans_a;
  if (b.dtype() == DType::F32) {
    p.b = b.data<float>();
  } else {  // f16 / bf16, [N, K] (validated)
    p.b_type = b.dtype() == DType::BF16 ? gemm::BType::bf16 : gemm::BType::f16;
    p.b16 = reinterpret_cast<const uint16_t*>(b.host_bytes());
  }
  p.ldb = b.dim(-1);
  // The batch stride is the full stored matrix even when b_rows cuts it (the KV cache).
  p.stride_b = b.rank() == 3 ? b.dim(-2) * b.dim(-1) : 0;
  p.trans_b = spec.trans_b;
  p.c = out.data<float>();
  p.ldc = p.N;
  p.stride_c = p.M * p.N;
  p.alpha = spec.alpha;
  p.bias = bias.defined() ? bias.data<float>() : nullptr;
  p.gelu = spec.gelu;
  p.accumulate = accumulate;
  return p;
}

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias,
                        const MatmulSpec& spec, bool accumulate, Tensor& out) {
  gemm::run(matmul_problem(a, b, bias, spec, accumulate, out));
}

}  // namespace forge::cpu
