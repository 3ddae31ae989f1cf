#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// The large-shape matmul, same semantics, bindings and push constants as matmul.comp:
//   out = [acc +] [gelu](alpha * op(a) @ op(b) + bias) (matmul_epilogue.glsl), batched,
//   op(a)[m, k] = trans_a ? a[k * lda + m] : a[m * lda + k]   (+ batch * stride_a)
//   op(b)[k, n] = trans_b ? b[n * ldb + k] : b[k * ldb + n]   (+ batch * stride_b)
//   out[batch * stride_c + m * ldc + n]
// A workgroup of 16 x 16 invocations computes a 128 x 128 tile; invocation (tx, ty) an 8 x 8
// block: rows 4 ty + {0..3} and 64 + 4 ty + {0..3}, columns 4 tx + {0..3} and 64 + 4 tx +
// {0..3}. Per k it reads 2 + 2 runs of 4 consecutive floats from shared memory (16-byte
// aligned: one wide load each on GPUs that merge them) for 64 FMAs. k advances BK at a time
// through two shared buffers stored k-major ([k][m], [k][n]); the next tile travels global ->
// registers while the current one feeds the FMAs, so one barrier per step. Plain float
// arrays only, every loop over registers fully unrolled with constant indices (a dynamically
// indexed register array would live in slow local memory on many GPUs).
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

const uint BM = 128u, BN = 128u, BK = 8u;
shared float As[2][BK][BM];  // 2 x 8 x 128 floats: 8 KiB
shared float Bs[2][BK][BN];

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

  // What this invocation loads of each tile: 4 elements consecutive in memory.
  //  k contiguous (a [M, K], b^T [N, K]): row tid / 2, k (tid % 2) * 4 + {0..3};
  //  row contiguous (a^T [K, M], b [K, N]): k tid / 32, column (tid % 32) * 4 + {0..3}.
  const uint row_kc = tid / 2u, k_kc = (tid % 2u) * 4u;
  const uint k_rc = tid / 32u, col_rc = (tid % 32u) * 4u;
  float ra[4], rb[4];

  float acc[8][8];
  [[unroll]] for (uint i = 0u; i < 8u; ++i)
    [[unroll]] for (uint j = 0u; j < 8u; ++j) acc[i][j] = 0.0;

  uint cur = 0u;
  for (uint k0 = k_begin; k0 < k_end + BK; k0 += BK) {
    // Stage 1 (k0 < k_end): load the tile at k0 into registers.
    if (k0 < k_end) {
      if (ta) {
        const uint gk = k0 + k_rc, gm = m0 + col_rc;
        [[unroll]] for (uint i = 0u; i < 4u; ++i)
          ra[i] = gk < k_end && gm + i < p.M ? a[abase + gk * p.lda + gm + i] : 0.0;
      } else {
        const uint gm = m0 + row_kc, gk = k0 + k_kc;
        [[unroll]] for (uint i = 0u; i < 4u; ++i)
          ra[i] = gm < p.M && gk + i < k_end ? a[abase + gm * p.lda + gk + i] : 0.0;
      }
      if (tb) {
        const uint gn = n0 + row_kc, gk = k0 + k_kc;
        [[unroll]] for (uint i = 0u; i < 4u; ++i)
          rb[i] = gn < p.N && gk + i < k_end ? b[bbase + gn * p.ldb + gk + i] : 0.0;
      } else {
        const uint gk = k0 + k_rc, gn = n0 + col_rc;
        [[unroll]] for (uint i = 0u; i < 4u; ++i)
          rb[i] = gk < k_end && gn + i < p.N ? b[bbase + gk * p.ldb + gn + i] : 0.0;
      }
    }
    // Stage 2 (k0 > k_begin): the previous tile's FMAs, from buffer cur, while loads fly.
    if (k0 > k_begin) {
      [[unroll]] for (uint kk = 0u; kk < BK; ++kk) {
        float av[8], bv[8];
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
          av[i] = As[cur][kk][4u * ty + i];
          av[4u + i] = As[cur][kk][64u + 4u * ty + i];
          bv[i] = Bs[cur][kk][4u * tx + i];
          bv[4u + i] = Bs[cur][kk][64u + 4u * tx + i];
        }
        [[unroll]] for (uint i = 0u; i < 8u; ++i)
          [[unroll]] for (uint j = 0u; j < 8u; ++j) acc[i][j] += av[i] * bv[j];
      }
      cur ^= 1u;
    }
    // Stage 3: the loaded tile into the other buffer (last read before the previous barrier).
    if (k0 < k_end) {
      if (ta) {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) As[cur][k_rc][col_rc + i] = ra[i];
      } else {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) As[cur][k_kc + i][row_kc] = ra[i];
      }
      if (tb) {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) Bs[cur][k_kc + i][row_kc] = rb[i];
      } else {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) Bs[cur][k_rc][col_rc + i] = rb[i];
      }
    }
    barrier();
  }

  if (split) {
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
      const uint m = m0 + (i < 4u ? 4u * ty + i : 64u + 4u * ty + i - 4u);
      [[unroll]] for (uint j = 0u; j < 8u; ++j) {
        const uint n = n0 + (j < 4u ? 4u * tx + j : 64u + 4u * tx + j - 4u);
        if (m < p.M && n < p.N) o[p.oo + ((batch * p.M + m) * splits + part) * p.N + n] = acc[i][j];
      }
    }
    return;
  }
  const uint obase = p.oo + batch * p.stride_c;
  const bool has_bias = (p.flags & 4u) != 0u;
  float bv[8];
  [[unroll]] for (uint j = 0u; j < 8u; ++j) {
    const uint n = n0 + (j < 4u ? 4u * tx + j : 64u + 4u * tx + j - 4u);
    bv[j] = has_bias && n < p.N ? bias[p.obias + n] : 0.0;
  }
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    const uint m = m0 + (i < 4u ? 4u * ty + i : 64u + 4u * ty + i - 4u);
    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
      const uint n = n0 + (j < 4u ? 4u * tx + j : 64u + 4u * tx + j - 4u);
      const uint oi = obase + m * p.ldc + n;
      if (m < p.M && n < p.N) o[oi] = epilogue(p.alpha * acc[i][j] + bv[j], oi);
    }
  }
}
