#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// Column sums of a block of rows: out[b, c] = sum of x[r, c] over rows r of block b =
// gl_WorkGroupID.y (rows [b block_rows, (b + 1) block_rows) below `rows`), in order. One
// invocation per column; 256 columns per workgroup along x. With one block it is the whole
// column sum; VulkanBackend::column_sums runs it twice (blocks, then the blocks' sums) so
// that a tall x keeps hundreds of workgroups busy.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint ox, oo, rows, cols, block_rows; } p;
void main() {
  const uint c = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x;
  if (c >= p.cols) return;
  const uint b = gl_WorkGroupID.y;
  const uint end = min(p.rows, (b + 1u) * p.block_rows);
  float s = 0.0;
  for (uint r = b * p.block_rows; r < end; ++r) s += x[p.ox + r * p.cols + c];
  o[p.oo + b * p.cols + c] = s;
}
