#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out = [acc +] [gelu](alpha * op(a) @ op(b) + bias) (matmul_epilogue.glsl), batched.
// 64x64 output tiles per workgroup of 16x16 invocations, each computing a 4x4 register
// block (rows ty + 16i, columns tx + 16j, so stores are coalesced); k runs in steps of 16
// through shared memory.
//   op(a)[m, k] = trans_a ? a[k * lda + m] : a[m * lda + k]   (+ batch * stride_a)
//   op(b)[k, n] = trans_b ? b[n * ldb + k] : b[k * ldb + n]   (+ batch * stride_b)
//   out[batch * stride_c + m * ldc + n]
// Workgroup (x, y, z) = (n tile, m tile, batch), plus the base of this dispatch (large
// grids are split into several dispatches within maxComputeWorkGroupCount).
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer O { float o[]; };  // read too with accumulate (flag 16)
layout(push_constant) uniform P {
  uint oa, ob, obias, oo;
  uint M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
  uint flags;  // 1: trans_a, 2: trans_b, 4: bias, 8: gelu, 16: accumulate (epilogue)
  float alpha;
  uint tile_n0, tile_m0, batch0;
  // With flags & 64 (split k): workgroup z = batch * splits + split covers k in
  // [split k_split, (split + 1) k_split) and writes raw sums to o[(row * splits + split) * N
  // + n], row = batch * M + m, for split_k_reduce.comp.
  uint k_split;
} p;
#include "matmul_epilogue.glsl"

const uint BM = 64u, BN = 64u, BK = 16u;
shared float As[BK][BM + 1u];
shared float Bs[BK][BN + 1u];

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint tid = ty * 16u + tx;
  const uint n0 = (gl_WorkGroupID.x + p.tile_n0) * BN;
  const uint m0 = (gl_WorkGroupID.y + p.tile_m0) * BM;
  const bool split = (p.flags & 64u) != 0u;
  const uint splits = split ? (p.K + p.k_split - 1u) / p.k_split : 1u;
  const uint z = gl_WorkGroupID.z + p.batch0;
  const uint batch = z / splits, part = z % splits;
  const uint k_begin = split ? part * p.k_split : 0u;
  const uint k_end = split ? min(k_begin + p.k_split, p.K) : p.K;
  const bool ta = (p.flags & 1u) != 0u, tb = (p.flags & 2u) != 0u;
  const uint abase = p.oa + batch * p.stride_a;
  const uint bbase = p.ob + batch * p.stride_b;

  float acc[4][4];
  for (uint i = 0u; i < 4u; ++i)
    for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;

  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    // 1024 elements of each tile, 4 per invocation. The fast index follows memory order
    // of the stored operand so that loads are coalesced.
    for (uint r = 0u; r < 4u; ++r) {
      const uint e = tid + r * 256u;
      uint mm, kk;
      if (ta) { kk = e / BM; mm = e % BM; } else { mm = e / BK; kk = e % BK; }
      const uint gm = m0 + mm, gk = k0 + kk;
      float v = 0.0;
      if (gm < p.M && gk < k_end) v = ta ? a[abase + gk * p.lda + gm] : a[abase + gm * p.lda + gk];
      As[kk][mm] = v;
      uint nn;
      if (tb) { nn = e / BK; kk = e % BK; } else { kk = e / BN; nn = e % BN; }
      const uint gn = n0 + nn, gk2 = k0 + kk;
      float w = 0.0;
      if (gn < p.N && gk2 < k_end) w = tb ? b[bbase + gn * p.ldb + gk2] : b[bbase + gk2 * p.ldb + gn];
      Bs[kk][nn] = w;
    }
    barrier();
    for (uint kk = 0u; kk < BK; ++kk) {
      float ar[4], br[4];
      for (uint i = 0u; i < 4u; ++i) ar[i] = As[kk][ty + 16u * i];
      for (uint j = 0u; j < 4u; ++j) br[j] = Bs[kk][tx + 16u * j];
      for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] += ar[i] * br[j];
    }
    barrier();
  }

  if (split) {
    for (uint i = 0u; i < 4u; ++i) {
      const uint m = m0 + ty + 16u * i;
      if (m >= p.M) continue;
      for (uint j = 0u; j < 4u; ++j) {
        const uint n = n0 + tx + 16u * j;
        if (n < p.N) o[p.oo + ((batch * p.M + m) * splits + part) * p.N + n] = acc[i][j];
      }
    }
    return;
  }
  const uint obase = p.oo + batch * p.stride_c;
  for (uint i = 0u; i < 4u; ++i) {
    const uint m = m0 + ty + 16u * i;
    if (m >= p.M) continue;
    for (uint j = 0u; j < 4u; ++j) {
      const uint n = n0 + tx + 16u * j;
      if (n >= p.N) continue;
      float v = p.alpha * acc[i][j];
      if ((p.flags & 4u) != 0u) v += bias[p.obias + n];
      const uint oi = obase + m * p.ldc + n;
      o[oi] = epilogue(v, oi);
    }
  }
}
