#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// out[ids[i] - row_begin, c] += src[i, c] for the ids of out's rows row_begin.. (vrows of
// them: a window of a larger table), no atomics: invocation c owns column c of every output
// row and walks the ids in index order (deterministic, same order as the CPU).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint ids[]; };
layout(std430, binding = 1) readonly buffer S { float src[]; };
layout(std430, binding = 2) buffer O { float o[]; };
layout(push_constant) uniform P { uint oi, os, oo, n, cols, row_begin, vrows; } p;
void main() {
  const uint c = flat_index();
  if (c >= p.cols) return;
  for (uint i = 0u; i < p.n; ++i) {
    const uint r = ids[p.oi + i] - p.row_begin;  // unsigned: ids below the window wrap high
    if (r < p.vrows) o[p.oo + r * p.cols + c] += src[p.os + i * p.cols + c];
  }
}
