#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Matrix-vector product with a q8_0 / q4_0 weight W [N, K] used transposed, over a few
// activation rows r (one per workgroup z) that quantize_rows_q8 rounded to int8 blocks
// (binding 0: their int8s, 4 per word, then their block scales). A workgroup owns 8 rows of
// W; the 32 invocations of a row take its blocks lx, lx + 32, ... (a warp reads 32
// consecutive blocks: 1088 bytes of q8_0), each an exact integer dot product of 32 int8
// pairs, summed in f32 as (dw * d) * dot; then one invocation adds the 32 partials in order.
layout(local_size_x = 32, local_size_y = 8) in;
layout(std430, binding = 0) readonly buffer A { uint qa[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer O { float o[]; };  // read too with accumulate
#include "weight_matmul.glsl"
#include "weights.glsl"

shared float part[8][33];

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint n = gl_WorkGroupID.x * 8u + ly;
  const uint r = gl_WorkGroupID.z;
  const bool q4 = (p.flags & kVariant) != 0u;
  const uint kb = p.K / 32u, bb = q4 ? 18u : 34u;  // blocks per row, bytes per block
  float acc = 0.0;
  if (n < p.N) {
    const uint row = 4u * p.ow + p.wbyte + n * kb * bb;
    const uint qrow = p.oa + r * (p.K / 4u), drow = p.oa + p.rows * (p.K / 4u) + r * kb;
    for (uint j = lx; j < kb; j += 32u) {
      const uint blk = row + j * bb;
      const float dw = unpackHalf2x16(w_half(blk)).x;
      int dot = 0;
      if (q4) {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
          const uint nib = w_word(blk + 2u + 4u * i);
          dot += dot4_i8(nibbles_i8(nib, false), qa[qrow + 8u * j + i]);
          dot += dot4_i8(nibbles_i8(nib, true), qa[qrow + 8u * j + 4u + i]);
        }
      } else {
        [[unroll]] for (uint i = 0u; i < 8u; ++i)
          dot += dot4_i8(w_word(blk + 2u + 4u * i), qa[qrow + 8u * j + i]);
      }
      acc += (dw * uintBitsToFloat(qa[drow + j])) * float(dot);
    }
  }
  part[ly][lx] = acc;
  barrier();
  if (lx == 0u && n < p.N) {
    float s = 0.0;
    for (uint j = 0u; j < 32u; ++j) s += part[ly][j];
    store(r, n, s);
  }
}
