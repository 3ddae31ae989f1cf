#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// Head layout gather, one invocation per output element of [B*nh, T, hd]:
//   out[b*nh + h, t, d] = src[(b*T + t) * row_stride + col0 + h*hd + d].
// split_heads: row_stride = 3C, col0 = part*C; unmerge_heads: row_stride = C, col0 = 0.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint os, oo, n, T, hd, nh, row_stride, col0; } p;
void main() {
  const uint e = flat_index();
  if (e >= p.n) return;
  const uint row = e / p.hd, d = e % p.hd;
  const uint bh = row / p.T, t = row % p.T;
  const uint b = bh / p.nh, h = bh % p.nh;
  o[p.oo + e] = src[p.os + (b * p.T + t) * p.row_stride + p.col0 + h * p.hd + d];
}
