#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// out[ids[i], c] += src[i, c], no atomics: invocation c owns column c of every output row
// and walks the ids in index order (deterministic, same order as the CPU).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint ids[]; };
layout(std430, binding = 1) readonly buffer S { float src[]; };
layout(std430, binding = 2) buffer O { float o[]; };
layout(push_constant) uniform P { uint oi, os, oo, n, cols; } p;
void main() {
  const uint c = flat_index();
  if (c >= p.cols) return;
  for (uint i = 0u; i < p.n; ++i) o[p.oo + ids[p.oi + i] * p.cols + c] += src[p.os + i * p.cols + c];
}
