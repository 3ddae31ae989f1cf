#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// Inverse head layout, one invocation per output element of [B, T, nh*hd] (parts = 1:
// merge_heads) or [B, T, 3*nh*hd] (parts = 3: unsplit_head from dq|dk|dv):
//   out[b, t, part*C + h*hd + d] = src_part[(b*nh + h) * T + t, d].
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S0 { float s0[]; };
layout(std430, binding = 1) readonly buffer S1 { float s1[]; };
layout(std430, binding = 2) readonly buffer S2 { float s2[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint o0, o1, o2, oo, n, T, hd, nh, parts; } p;
void main() {
  const uint e = flat_index();
  if (e >= p.n) return;
  const uint C = p.nh * p.hd;
  const uint width = p.parts * C;
  const uint bt = e / width, c3 = e % width;
  const uint part = c3 / C, c = c3 % C;
  const uint h = c / p.hd, d = c % p.hd;
  const uint b = bt / p.T, t = bt % p.T;
  const uint src = ((b * p.nh + h) * p.T + t) * p.hd + d;
  float v;
  if (part == 0u) v = s0[p.o0 + src];
  else if (part == 1u) v = s1[p.o1 + src];
  else v = s2[p.o2 + src];
  o[p.oo + e] = v;
}
