#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// out = op(a) @ W^T with an f16 / bf16 weight W [N, K], for more rows than the GEMV takes
// (prefill): 64 x 64 output tiles, 256 invocations of 4 x 4 outputs each (rows ty + 16 i,
// columns tx + 16 j: conflict-free shared reads). Per step of 16 k, the workgroup stages
// op(a)'s 64 x 16 floats and W's 64 x 16 weights, widened to f32 as they are stored in
// shared memory (8.5 KiB), then multiplies in f32.
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer O { float o[]; };  // read too with accumulate
#include "weight_matmul.glsl"
#include "weights.glsl"

const uint kT = 64u, kBK = 16u;
shared float as_[kBK][kT + 1u];
shared float ws_[kBK][kT + 1u];

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint t = ty * 16u + tx;
  const uint n0 = gl_WorkGroupID.x * kT, r0 = gl_WorkGroupID.y * kT;
  const bool bf16 = (p.flags & kVariant) != 0u;
  const bool ta = (p.flags & kTransA) != 0u;
  const uint wrow0 = 4u * p.ow + p.wbyte;
  float acc[4][4];
  [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0u; k0 < p.K; k0 += kBK) {
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
      const uint e = t + 256u * q;
      // op(a): along k when a is [M, K] (coalesced), along m when it is [K, M].
      const uint ar = ta ? e % kT : e / kBK, ak = ta ? e / kT : e % kBK;
      const uint r = r0 + ar, k = k0 + ak;
      as_[ak][ar] = r < p.rows && k < p.K ? a[a_index(r, k)] : 0.0;
      const uint wn = e / kBK, wk = e % kBK;
      const uint n = n0 + wn, kk = k0 + wk;
      ws_[wk][wn] = n < p.N && kk < p.K ? widen16(w_half(wrow0 + 2u * (n * p.K + kk)), bf16) : 0.0;
    }
    barrier();
    [[unroll]] for (uint k = 0u; k < kBK; ++k) {
      float av[4], wv[4];
      [[unroll]] for (uint i = 0u; i < 4u; ++i) av[i] = as_[k][ty + 16u * i];
      [[unroll]] for (uint j = 0u; j < 4u; ++j) wv[j] = ws_[k][tx + 16u * j];
      [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] += av[i] * wv[j];
    }
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j) {
    const uint r = r0 + ty + 16u * i, n = n0 + tx + 16u * j;
    if (r < p.rows && n < p.N) store(r, n, acc[i][j]);
  }
}
