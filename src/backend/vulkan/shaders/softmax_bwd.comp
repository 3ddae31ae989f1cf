#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "reduce.glsl"
// dx = y * (dy - <y, dy>) per row; one workgroup per row.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform P { uint oy, ody, odx, rows, cols; } p;
void main() {
  const uint r = flat_group();
  if (r >= p.rows) return;
  const uint l = gl_LocalInvocationID.x;
  const uint yb = p.oy + r * p.cols, db = p.ody + r * p.cols, xb = p.odx + r * p.cols;
  float s = 0.0;
  for (uint j = l; j < p.cols; j += 256u) s += y[yb + j] * dy[db + j];
  const float dot = wg_sum(s);
  for (uint j = l; j < p.cols; j += 256u) dx[xb + j] = y[yb + j] * (dy[db + j] - dot);
}
