// The portable attention tile (attention_loops.h) compiled for AVX2 + FMA (this file gets
// -mavx2 -mfma): the same C++ as the baseline build in attention.cpp, auto-vectorized 8
// lanes wide.
#include "backend/cpu/attention_loops.h"

namespace forge::cpu {

void attention_tile_avx2(const AttnTile& t, float* scratch) { attention_tile_loop(t, scratch); }

}  // namespace forge::cpu
