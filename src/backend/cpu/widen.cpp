// 16-bit weights (f16, bf16) widened to f32 for the GEMM (gemm.h: widen): F16C where the CPU
// has it (widen_avx2.cpp), else exact scalar conversion (io/half.h).
#include "backend/cpu/gemm.h"
#include "io/half.h"

namespace forge::cpu::gemm {

void widen_avx2(BType t, const uint16_t* src, int64_t n, float* dst);  // widen_avx2.cpp

void widen(BType t, const uint16_t* src, int64_t n, float* dst) {
#if defined(__x86_64__)
  if (simd_level() != SimdLevel::Portable) return widen_avx2(t, src, n, dst);
#endif
  if (t == BType::bf16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = io::bf16_to_f32(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = io::f16_to_f32(src[i]);
  }
}

}  // namespace forge::cpu::gemm
