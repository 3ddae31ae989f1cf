#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "reduce.glsl"
// LayerNorm backward, dx of one row per workgroup:
//   dx = rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat)).
// With stats = 1 it only stores (mean, rstd) of the row into `o` (2 floats per row) for the
// parameter-gradient pass: the same code computes them, and 4 bindings suffice (the number
// every Vulkan device guarantees).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) readonly buffer DY { float dy[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, og, ody, oo, rows, cols; float eps; uint stats; } p;
void main() {
  const uint r = flat_group();
  if (r >= p.rows) return;
  const uint l = gl_LocalInvocationID.x;
  const uint xb = p.ox + r * p.cols, db = p.ody + r * p.cols;
  float s = 0.0;
  for (uint j = l; j < p.cols; j += 256u) s += x[xb + j];
  const float mean = wg_sum(s) / float(p.cols);
  float q = 0.0;
  for (uint j = l; j < p.cols; j += 256u) {
    const float d = x[xb + j] - mean;
    q += d * d;
  }
  const float rstd = 1.0 / sqrt(wg_sum(q) / float(p.cols) + p.eps);
  if (p.stats != 0u) {
    if (l == 0u) {
      o[p.oo + 2u * r] = mean;
      o[p.oo + 2u * r + 1u] = rstd;
    }
    return;
  }
  float sg = 0.0, sgx = 0.0;
  for (uint j = l; j < p.cols; j += 256u) {
    const float gj = dy[db + j] * g[p.og + j];
    sg += gj;
    sgx += gj * (x[xb + j] - mean);
  }
  const float mean_g = wg_sum(sg) / float(p.cols);
  const float mean_gx = wg_sum(sgx) * rstd / float(p.cols);
  for (uint j = l; j < p.cols; j += 256u) {
    const float xhat = (x[xb + j] - mean) * rstd;
    o[p.oo + r * p.cols + j] = rstd * (dy[db + j] * g[p.og + j] - mean_g - xhat * mean_gx);
  }
}
