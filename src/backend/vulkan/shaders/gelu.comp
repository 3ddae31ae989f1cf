#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// tanh GELU written as x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3); the exp
// argument is clamped so that it stays finite (as the CPU's exp_fast does).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, oo, n; } p;
void main() {
  const uint i = flat_index();
  if (i >= p.n) return;
  const float v = x[p.ox + i];
  const float u = 0.7978845608028654 * v * (1.0 + 0.044715 * v * v);
  o[p.oo + i] = v / (1.0 + exp(clamp(-2.0 * u, -87.3, 88.0)));
}
