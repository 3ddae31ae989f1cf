#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// cache[g, pos + t, :] = x[g, t, :]; cache [G, cap, hd], x [G, t, hd].
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer C { float cache[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P { uint oc, ox, n, t, hd, cap, pos; } p;
void main() {
  const uint e = flat_index();
  if (e >= p.n) return;
  const uint run = p.t * p.hd;
  const uint g = e / run, rem = e % run;
  cache[p.oc + (g * p.cap + p.pos) * p.hd + rem] = x[p.ox + e];
}
