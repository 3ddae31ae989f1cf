#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "reduce.glsl"
// Pass 1 of sumsq: workgroup w sums x^2 over elements [w * chunk, (w + 1) * chunk) into
// partial[w] (square = 1) or plain values (square = 0, pass 2 over the partials).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, oo, n, chunk, square; } p;
void main() {
  const uint w = flat_group();
  const uint begin = w * p.chunk;
  const uint end = min(p.n, begin + p.chunk);
  float s = 0.0;
  for (uint i = begin + gl_LocalInvocationID.x; i < end; i += 256u) {
    const float v = x[p.ox + i];
    s += p.square != 0u ? v * v : v;
  }
  s = wg_sum(s);
  if (gl_LocalInvocationID.x == 0u) o[p.oo + w] = s;
}
