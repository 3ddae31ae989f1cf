#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// LayerNorm backward, parameter gradients of a block of rows: for block b =
// gl_WorkGroupID.y (rows [b block_rows, (b + 1) block_rows)), one invocation per column c
// sums in order part[b, c] = sum dy * xhat (dgamma) and part[blocks + b, c] = sum dy
// (dbeta), with (mean, rstd) per row from layernorm_bwd_dx's stats mode. The block sums are
// then added in order (sum_rows.comp).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, binding = 2) readonly buffer S { float st[]; };
layout(std430, binding = 3) writeonly buffer Part { float part[]; };
layout(push_constant) uniform P { uint ox, ody, ost, opart, rows, cols, block_rows; } p;
void main() {
  const uint c = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x;
  if (c >= p.cols) return;
  const uint b = gl_WorkGroupID.y;
  const uint end = min(p.rows, (b + 1u) * p.block_rows);
  float sg = 0.0, sb = 0.0;
  for (uint r = b * p.block_rows; r < end; ++r) {
    const float d = dy[p.ody + r * p.cols + c];
    sg += d * ((x[p.ox + r * p.cols + c] - st[p.ost + 2u * r]) * st[p.ost + 2u * r + 1u]);
    sb += d;
  }
  part[p.opart + b * p.cols + c] = sg;
  part[p.opart + (gl_NumWorkGroups.y + b) * p.cols + c] = sb;
}
