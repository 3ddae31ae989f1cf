#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// dx = dy * gelu'(x), with s = 1 / (1 + e), e = exp(-2u):
// gelu'(x) = s + 2 x s (e s) du/dx.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform P { uint ox, ody, odx, n; } p;
void main() {
  const uint i = flat_index();
  if (i >= p.n) return;
  const float v = x[p.ox + i];
  const float k0 = 0.7978845608028654, k1 = 0.044715;
  const float u = k0 * v * (1.0 + k1 * v * v);
  const float e = exp(clamp(-2.0 * u, -87.3, 88.0));
  const float s = 1.0 / (1.0 + e);
  const float du = k0 * (1.0 + 3.0 * k1 * v * v);
  dx[p.odx + i] = dy[p.ody + i] * (s + 2.0 * v * s * (e * s) * du);
}
