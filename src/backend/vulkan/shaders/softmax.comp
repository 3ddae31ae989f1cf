#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "reduce.glsl"
// Row softmax, one workgroup per row. Causal: row r (index i = r % T along dim -2) sees
// columns j <= i + offset; the mask comes before the max and masked outputs are exact 0.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, oo, rows, cols, causal, T, offset; } p;
void main() {
  const uint r = flat_group();
  if (r >= p.rows) return;  // uniform per workgroup
  const uint l = gl_LocalInvocationID.x;
  uint n = p.cols;
  if (p.causal != 0u) {
    const uint i = r % p.T;
    if (p.offset < p.cols - i) n = i + p.offset + 1u;
  }
  const uint xb = p.ox + r * p.cols, ob = p.oo + r * p.cols;
  float mx = -3.402823466e38;
  for (uint j = l; j < n; j += 256u) mx = max(mx, x[xb + j]);
  mx = wg_max(mx);
  float s = 0.0;
  for (uint j = l; j < n; j += 256u) s += exp(x[xb + j] - mx);
  s = wg_sum(s);
  const float k = 1.0 / s;
  for (uint j = l; j < p.cols; j += 256u) o[ob + j] = j < n ? exp(x[xb + j] - mx) * k : 0.0;
}
