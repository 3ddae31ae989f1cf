// The portable attention tile (attention_loops.h) compiled for AVX-512 (this file gets
// -mavx512f and friends): the same C++ as the baseline build in attention.cpp,
// auto-vectorized 16 lanes wide.
#include "backend/cpu/attention_loops.h"

namespace forge::cpu {

void attention_tile_avx512(const AttnTile& t, float* scratch) { attention_tile_loop(t, scratch); }

}  // namespace forge::cpu
