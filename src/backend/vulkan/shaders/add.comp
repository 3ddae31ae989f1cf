#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// out = a + b; b is either a's shape (bn == n) or a row [bn] added to every row.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint oa, ob, oo, n, bn; } p;
void main() {
  const uint i = flat_index();
  if (i >= p.n) return;
  const uint j = p.bn == p.n ? i : i % p.bn;
  o[p.oo + i] = a[p.oa + i] + b[p.ob + j];
}
