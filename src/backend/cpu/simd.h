// Runtime SIMD dispatch: which instruction set this CPU's kernels use.
#pragma once

namespace forge::cpu {

enum class SimdLevel { Portable, Avx2, Avx512 };

/// Detected once (cpuid + OS support); FORGE_SIMD=portable|avx2|avx512 caps it (for tests
/// of every path on one machine; a level above the CPU's is the CPU's). Error(Format) for
/// any other non-empty FORGE_SIMD.
SimdLevel simd_level();
const char* simd_level_name(SimdLevel level);

}  // namespace forge::cpu
