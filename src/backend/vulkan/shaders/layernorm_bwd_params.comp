#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// LayerNorm backward, parameter gradients: one invocation per column c sums, over rows in
// order, dgamma[c] += dy * xhat and dbeta[c] += dy (mean/rstd from layernorm_bwd_dx).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) readonly buffer S { float st[]; };
layout(std430, binding = 3) writeonly buffer DG { float dg[]; };
layout(std430, binding = 4) writeonly buffer DB { float db[]; };
layout(push_constant) uniform P { uint ox, ody, ost, odg, odb, rows, cols; } p;
void main() {
  const uint c = flat_index();
  if (c >= p.cols) return;
  float sg = 0.0, sb = 0.0;
  for (uint r = 0u; r < p.rows; ++r) {
    const float d = dy[p.ody + r * p.cols + c];
    sg += d * ((x[p.ox + r * p.cols + c] - st[p.ost + 2u * r]) * st[p.ost + 2u * r + 1u]);
    sb += d;
  }
  dg[p.odg + c] = sg;
  db[p.odb + c] = sb;
}
