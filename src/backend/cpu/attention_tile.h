// The inner kernel of the CPU's fused attention (attention.cpp): one tile of queries of one
// (batch, head) against its causal prefix of keys. The kernel is portable C++
// (attention_loops.h) compiled three times, for the baseline ISA (attention.cpp), AVX2 + FMA
// (attention_avx2.cpp) and AVX-512 (attention_avx512.cpp); pick() (vec_kernels.h) chooses.
#pragma once

#include <cstddef>
#include <cstdint>

namespace forge::cpu {

inline constexpr int64_t kAttnBr = 64;   // queries per tile (a task of the thread pool)
inline constexpr int64_t kAttnBc = 64;   // keys per online-softmax step
inline constexpr int64_t kAttnPad = 16;  // hd is padded to a multiple of this (a zmm)
/// Tiles of at most this many queries (decode steps) skip the blocked schedule.
inline constexpr int64_t kAttnRowsDirect = 4;
/// Queries whose scores are formed together (each key vector loaded once for them).
inline constexpr int64_t kAttnGroup = 4;

/// One tile: `rows` (1..kAttnBr) consecutive queries; query r sees keys 0..first + r.
struct AttnTile {
  const float* q = nullptr;  // query row r at q + r * q_stride (unscaled)
  int64_t q_stride = 0;
  const float* k = nullptr;  // key row s at k + s * kv_stride, s < first + rows
  const float* v = nullptr;  // value row s at v + s * kv_stride
  int64_t kv_stride = 0;
  float* y = nullptr;  // output row r at y + r * y_stride
  int64_t y_stride = 0;
  int64_t rows = 0;
  int64_t first = 0;
  int64_t hd = 0;
  float scale = 1.0f;  // applied to the scores: 1 / sqrt(hd)
};

inline int64_t attn_padded(int64_t hd) { return (hd + kAttnPad - 1) / kAttnPad * kAttnPad; }

/// Floats of scratch a tile needs (see attention_loops.h for the layouts).
/// rows rounded up to a whole number of groups.
inline int64_t attn_group_rows(int64_t rows) {
  return (rows + kAttnGroup - 1) / kAttnGroup * kAttnGroup;
}

inline size_t attn_scratch_floats(const AttnTile& t) {
  const int64_t hdp = attn_padded(t.hd);
  if (t.rows <= kAttnRowsDirect) return static_cast<size_t>(2 * hdp + t.first + t.rows);
  return static_cast<size_t>((attn_group_rows(t.rows) + t.rows + 2 * kAttnBc) * hdp + 2 * t.rows);
}

/// The kernel per ISA; `scratch` holds attn_scratch_floats(t) floats, any
/// contents. Call the AVX2/AVX-512 builds only when simd_level() allows them.
void attention_tile_baseline(const AttnTile& t, float* scratch);
void attention_tile_avx2(const AttnTile& t, float* scratch);
void attention_tile_avx512(const AttnTile& t, float* scratch);

}  // namespace forge::cpu
