#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "reduce.glsl"
// LayerNorm of one row per workgroup: two passes (mean, then biased variance).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, og, ob, oo, rows, cols; float eps; } p;
void main() {
  const uint r = flat_group();
  if (r >= p.rows) return;
  const uint l = gl_LocalInvocationID.x;
  const uint xb = p.ox + r * p.cols;
  float s = 0.0;
  for (uint j = l; j < p.cols; j += 256u) s += x[xb + j];
  const float mean = wg_sum(s) / float(p.cols);
  float q = 0.0;
  for (uint j = l; j < p.cols; j += 256u) {
    const float d = x[xb + j] - mean;
    q += d * d;
  }
  const float rstd = 1.0 / sqrt(wg_sum(q) / float(p.cols) + p.eps);
  for (uint j = l; j < p.cols; j += 256u)
    o[p.oo + r * p.cols + j] = (x[xb + j] - mean) * rstd * g[p.og + j] + b[p.ob + j];
}
