// matmul kernels on the CPU (placeholder: replaced by the packed GEMM).
#include "backend/cpu/cpu_backend.h"
#include "forge/error.h"

namespace forge::cpu {

void CpuBackend::matmul(const Tensor&, const Tensor&, const Tensor&, const MatmulSpec&, Tensor&) {
  throw Error(ErrorKind::Unsupported, "matmul: not implemented on cpu yet");
}
void CpuBackend::matmul_transb_into(const Tensor&, const Tensor&, float, int64_t, Tensor&) {
  throw Error(ErrorKind::Unsupported, "matmul_chunked_transb: not implemented on cpu yet");
}

}  // namespace forge::cpu
