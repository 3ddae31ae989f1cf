// The CPU's kernels for weights stored in 16-bit and block dtypes (forge/dtype.h): matmul
// with an f32 a and an f16 / bf16 / q8_0 / q4_0 b [N, K] (used transposed), and embedding
// rows gathered from such a table, widened to f32. The ops layer has checked the shapes.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"
#include "io/half.h"

namespace forge::cpu {
namespace {

// 16-bit b [N, K]: the f32 GEMM engine, widening b as it is read (gemm.h).
void matmul_16(Backend&, const OpCall& c) {
  gemm::run(matmul_problem(c.in(0), c.in(1), c.in(2), c.attrs.spec, c.attrs.accumulate, c.out(0)));
}

// Block-quantized b [N, K]: integer dot products over activations rounded to blocks (quant.h).
void matmul_blocks(Backend&, const OpCall& c) {
  const Tensor& a = c.in(0);
  const Tensor& b = c.in(1);
  const Tensor& bias = c.in(2);
  Tensor& out = c.out(0);
  const MatmulSpec& spec = c.attrs.spec;
  const int64_t batch = out.rank() == 3 ? out.dim(0) : 1;
  quant::Problem p;
  p.M = out.dim(-2);
  p.N = out.dim(-1);
  p.K = b.dim(-1);
  p.lda = a.dim(-1);
  p.trans_a = spec.trans_a;
  p.w = b.host_bytes();
  p.type = b.dtype();
  p.ldc = p.N;
  p.alpha = spec.alpha;
  p.bias = bias.defined() ? bias.data<float>() : nullptr;
  p.gelu = spec.gelu;
  p.accumulate = c.attrs.accumulate;
  const int64_t stride_a = a.rank() == 3 ? a.dim(-2) * a.dim(-1) : 0;
  for (int64_t bi = 0; bi < batch; ++bi) {  // a rank-2 a is shared by the batch
    p.a = a.data<float>() + bi * stride_a;
    p.c = out.data<float>() + bi * p.M * p.N;
    quant::run(p);
  }
}

// Row `row` of a table of any weight dtype, widened to f32.
void widen_row(const Tensor& table, int64_t row, float* dst) {
  const int64_t C = table.dim(1);
  const std::byte* base = table.host_bytes() + dtype_bytes(table.dtype(), row * C);
  switch (table.dtype()) {
    case DType::F16:
      return gemm::widen(gemm::BType::f16, reinterpret_cast<const uint16_t*>(base), C, dst);
    case DType::BF16:
      return gemm::widen(gemm::BType::bf16, reinterpret_cast<const uint16_t*>(base), C, dst);
    default: return quant::dequantize(table.dtype(), base, C, dst);
  }
}

void embedding_wide(Backend&, const OpCall& c) {
  const Tensor& ids = c.in(0);
  const Tensor& table = c.in(1);
  const uint32_t* pid = ids.data<uint32_t>();
  float* po = c.out(0).data<float>();
  const int64_t C = table.dim(1);
  parallel_for(ids.numel(), row_grain(C, kGrainElems), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) widen_row(table, static_cast<int64_t>(pid[i]), po + i * C);
  });
}

}  // namespace

void add_weight_kernels(Backend& be) {
  for (DType d : {DType::F16, DType::BF16}) {
    be.add_kernel(Op::matmul, dtype_key({DType::F32, d, DType::F32}), matmul_16);
    be.add_kernel(Op::embedding, dtype_key({DType::U32, d}), embedding_wide);
  }
  for (DType d : {DType::Q8_0, DType::Q4_0}) {
    be.add_kernel(Op::matmul, dtype_key({DType::F32, d, DType::F32}), matmul_blocks);
    be.add_kernel(Op::embedding, dtype_key({DType::U32, d}), embedding_wide);
  }
}

}  // namespace forge::cpu
