#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// One AdamW step in place (its constants formed once on the host: forge/backend.h AdamWStep).
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer PP { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) buffer M { float m[]; };
layout(std430, binding = 3) buffer V { float v[]; };
layout(push_constant) uniform P {
  uint op, og, om, ov, n;
  float decay, beta1, omb1, beta2, omb2, step_size, bc2_sqrt, eps;
} p;
void main() {
  const uint i = flat_index();
  if (i >= p.n) return;
  const float gi = g[p.og + i];
  const float mi = p.beta1 * m[p.om + i] + p.omb1 * gi;
  const float vi = p.beta2 * v[p.ov + i] + p.omb2 * gi * gi;
  m[p.om + i] = mi;
  v[p.ov + i] = vi;
  const float denom = sqrt(vi) / p.bc2_sqrt + p.eps;
  prm[p.op + i] = prm[p.op + i] * p.decay - p.step_size * mi / denom;
}
