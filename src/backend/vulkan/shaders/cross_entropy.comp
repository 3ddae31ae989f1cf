#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "reduce.glsl"
// One workgroup per row of logits [rows, V]. mode 0 (gather_nll):
//   out[r] = logsumexp(row) - row[target];
// mode 1 (ce_bwd): out[r, :] = (softmax(row) - onehot(target)) * scale.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) readonly buffer T { uint tg[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ol, ot, oo, rows, cols, mode; float scale; } p;
void main() {
  const uint r = flat_group();
  if (r >= p.rows) return;
  const uint l = gl_LocalInvocationID.x;
  const uint lb = p.ol + r * p.cols;
  float mx = -3.402823466e38;
  for (uint j = l; j < p.cols; j += 256u) mx = max(mx, lg[lb + j]);
  mx = wg_max(mx);
  float s = 0.0;
  for (uint j = l; j < p.cols; j += 256u) s += exp(lg[lb + j] - mx);
  s = wg_sum(s);
  const uint t = tg[p.ot + r];
  if (p.mode == 0u) {
    if (l == 0u) o[p.oo + r] = mx + log(s) - lg[lb + t];
    return;
  }
  const float k = p.scale / s;
  for (uint j = l; j < p.cols; j += 256u)
    o[p.oo + r * p.cols + j] = exp(lg[lb + j] - mx) * k - (j == t ? p.scale : 0.0);
}
