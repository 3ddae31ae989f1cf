#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// Inverted dropout with the counter-based mask of include/forge/ops.h (dropout_hash): element
// i is kept iff (hash(seed, index0 + i) >> 8) >= threshold. i fits in 32 bits (one binding);
// the 64-bit index is formed from 32-bit halves with the carry. Same integer ops as the
// CPU: bit-identical masks.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, oo, n, seed_lo, seed_hi, index0_lo, index0_hi, threshold; float scale; } p;
uint mix32(uint v) {
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  v *= 0x846ca68bu;
  v ^= v >> 16;
  return v;
}
void main() {
  const uint i = flat_index();
  if (i >= p.n) return;
  const uint lo = p.index0_lo + i;
  const uint hi = p.index0_hi + (lo < i ? 1u : 0u);
  const uint h = mix32(mix32(lo ^ p.seed_lo) ^ p.seed_hi ^ (hi * 0x9E3779B9u));
  const float v = x[p.ox + i];
  o[p.oo + i] = (h >> 8) >= p.threshold ? v * p.scale : 0.0;
}
