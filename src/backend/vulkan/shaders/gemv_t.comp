#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// Matrix-vector product for M = 1 with b stored [N, K] (trans_b): the LM head and q k^T in
// decode. A workgroup owns 8 columns; the 32 invocations of a column stride over its row of
// b (coalesced), then one adds the 32 partials in order. Where the row is 16-byte aligned
// (the LM head's rows of 768), an invocation reads it as vec4s, up to kSteps of them issued
// at once (a whole row of 768 in one step: one wait on memory; one scalar load at a time
// keeps too few bytes in flight for a GPU's bandwidth), and sums its 4 lanes in a
// fixed order; other rows go element by element. Same push constants as matmul.comp,
// epilogue (gelu, accumulate: matmul_epilogue.glsl) included.
layout(local_size_x = 32, local_size_y = 8) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 1) readonly buffer B4 { vec4 b4[]; };  // the same binding, as vec4
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer O { float o[]; };  // read too with accumulate
layout(push_constant) uniform P {
  uint oa, ob, obias, oo;
  uint M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
  uint flags;  // 1: trans_a, 2: trans_b, 4: bias, 8: gelu, 16: accumulate
  float alpha;
  uint tile_n0, tile_m0, batch0;
} p;
#include "matmul_epilogue.glsl"

const uint kSteps = 8u;  // vec4 loads in flight per invocation

shared float part[8][33];

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint n = (gl_WorkGroupID.x + p.tile_n0) * 8u + ly;
  const uint batch = gl_WorkGroupID.z + p.batch0;
  const uint abase = p.oa + batch * p.stride_a;
  const uint bbase = p.ob + batch * p.stride_b;
  const uint astep = (p.flags & 1u) != 0u ? p.lda : 1u;
  float acc = 0.0;
  if (n < p.N) {
    const uint row = bbase + n * p.ldb;
    uint k = lx;
    if (row % 4u == 0u) {
      // Elements [0, 4 K4) as vec4s: invocation lx takes vec4s lx, lx + 32, ...
      const uint K4 = p.K / 4u, row4 = row / 4u;
      vec4 acc4 = vec4(0.0);
      for (uint j0 = lx; j0 < K4; j0 += 32u * kSteps) {
        vec4 bv[kSteps];
        [[unroll]] for (uint u = 0u; u < kSteps; ++u) {
          const uint j = j0 + 32u * u;
          bv[u] = j < K4 ? b4[row4 + j] : vec4(0.0);
        }
        [[unroll]] for (uint u = 0u; u < kSteps; ++u) {
          const uint j = j0 + 32u * u;
          if (j < K4) {
            const uint e = abase + 4u * j * astep;
            acc4 += vec4(a[e], a[e + astep], a[e + 2u * astep], a[e + 3u * astep]) * bv[u];
          }
        }
      }
      acc = (acc4.x + acc4.y) + (acc4.z + acc4.w);
      k = 4u * K4 + lx;  // the last K % 4 elements
    }
    for (; k < p.K; k += 32u) acc += a[abase + k * astep] * b[row + k];
  }
  part[ly][lx] = acc;
  barrier();
  if (lx == 0u && n < p.N) {
    float s = 0.0;
    for (uint j = 0u; j < 32u; ++j) s += part[ly][j];
    float v = p.alpha * s;
    if ((p.flags & 4u) != 0u) v += bias[p.obias + n];
    const uint oi = p.oo + batch * p.stride_c + n;
    o[oi] = epilogue(v, oi);
  }
}
