#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// Matrix-vector product for M = 1 with b stored [K, N] (not transposed): the decode step's
// x @ W. A workgroup owns 32 columns of one k range; its 8 rows of invocations take every
// 8th k of the range, and the 8 partial sums of a column are added in order. Same push
// constants as matmul.comp, k_split included: with flags & 64, workgroup row y (gl_WorkGroupID.y)
// covers k in [y k_split, (y + 1) k_split) and writes its raw sum to o[(batch * splits + y)
// * N + n] for gemv_reduce.comp to add in order (a GPU needs hundreds of workgroups to pull
// its bandwidth; decode's N = 768 gives 24 column tiles).
layout(local_size_x = 32, local_size_y = 8) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint oa, ob, obias, oo;
  uint M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
  uint flags;  // 1: trans_a, 2: trans_b (not here), 4: bias
  float alpha;
  uint tile_n0, tile_m0, batch0;
  uint k_split;
} p;

shared float part[8][32];

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint n = (gl_WorkGroupID.x + p.tile_n0) * 32u + lx;
  const uint batch = gl_WorkGroupID.z + p.batch0;
  const uint abase = p.oa + batch * p.stride_a;
  const uint bbase = p.ob + batch * p.stride_b;
  // op(a)[0, k]: a stored [1, K] (step 1) or, transposed, [K, 1] (step lda = 1).
  const uint astep = (p.flags & 1u) != 0u ? p.lda : 1u;
  const bool split = (p.flags & 64u) != 0u;
  const uint k_begin = split ? gl_WorkGroupID.y * p.k_split : 0u;
  const uint k_end = split ? min(k_begin + p.k_split, p.K) : p.K;
  float acc = 0.0;
  if (n < p.N)
    for (uint k = k_begin + ly; k < k_end; k += 8u)
      acc += a[abase + k * astep] * b[bbase + k * p.ldb + n];
  part[ly][lx] = acc;
  barrier();
  if (ly == 0u && n < p.N) {
    float s = 0.0;
    for (uint j = 0u; j < 8u; ++j) s += part[j][lx];
    if (split) {
      o[p.oo + (batch * gl_NumWorkGroups.y + gl_WorkGroupID.y) * p.N + n] = s;
      return;
    }
    float v = p.alpha * s;
    if ((p.flags & 4u) != 0u) v += bias[p.obias + n];
    o[p.oo + batch * p.stride_c + n] = v;
  }
}
