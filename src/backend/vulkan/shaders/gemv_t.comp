#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// Matrix-vector product for M = 1 with b stored [N, K] (trans_b): the LM head and q k^T in
// decode. A workgroup owns 8 columns; the 32 invocations of a column stride over k (reading
// its row of b coalesced), then one adds the 32 partials in order. Same push constants as
// matmul.comp, epilogue (gelu, accumulate: matmul_epilogue.glsl) included.
layout(local_size_x = 32, local_size_y = 8) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
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

shared float part[8][33];

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint n = (gl_WorkGroupID.x + p.tile_n0) * 8u + ly;
  const uint batch = gl_WorkGroupID.z + p.batch0;
  const uint abase = p.oa + batch * p.stride_a;
  const uint bbase = p.ob + batch * p.stride_b;
  const uint astep = (p.flags & 1u) != 0u ? p.lda : 1u;
  float acc = 0.0;
  if (n < p.N)
    for (uint k = lx; k < p.K; k += 32u) acc += a[abase + k * astep] * b[bbase + n * p.ldb + k];
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
