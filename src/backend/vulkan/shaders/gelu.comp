#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "gelu.glsl"

// out = gelu(x), the tanh GELU of gelu.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, oo, n; } p;
void main() {
  const uint i = flat_index();
  if (i >= p.n) return;
  o[p.oo + i] = gelu_tanh(x[p.ox + i]);
}
