#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// Column sums: out[c] = sum_r x[r, c]. One invocation per column, rows in order.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, oo, rows, cols; } p;
void main() {
  const uint c = flat_index();
  if (c >= p.cols) return;
  float s = 0.0;
  for (uint r = 0u; r < p.rows; ++r) s += x[p.ox + r * p.cols + c];
  o[p.oo + c] = s;
}
