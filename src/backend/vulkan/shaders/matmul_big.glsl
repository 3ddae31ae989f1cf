// The body of the large-shape matmul kernels (matmul_big.comp: 128x128 tiles,
// matmul_big_64x128.comp, matmul_big_128x64.comp), same semantics, bindings and push
// constants as matmul.comp:
//   out = [acc +] [gelu](alpha * op(a) @ op(b) + bias) (matmul_epilogue.glsl), batched,
//   op(a)[m, k] = trans_a ? a[k * lda + m] : a[m * lda + k]   (+ batch * stride_a)
//   op(b)[k, n] = trans_b ? b[n * ldb + k] : b[k * ldb + n]   (+ batch * stride_b)
//   out[batch * stride_c + m * ldc + n]
// The including file defines BM and BN, the output tile (each 64 or 128). A workgroup of
// 16 x 16 invocations computes a BM x BN tile; invocation (tx, ty) a TM x TN block (TM = BM /
// 16, TN = BN / 16): rows 4 ty + {0..3} (and 64 + 4 ty + {0..3} when BM = 128), columns 4 tx
// + {0..3} (and 64 + 4 tx + {0..3} when BN = 128). Per k it reads TM / 4 + TN / 4 runs of 4
// consecutive floats from shared memory (16-byte aligned: one wide load each on GPUs that
// merge them) for TM TN FMAs. k advances BK at a time through two shared buffers stored
// k-major ([k][m], [k][n]); the next tile travels global -> registers while the current one
// feeds the FMAs, so one barrier per step. Plain float arrays only, every loop over
// registers fully unrolled with constant indices (a dynamically indexed register array would
// live in slow local memory on many GPUs).
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

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

const uint BK = 8u;
const uint TM = BM / 16u, TN = BN / 16u;  // the register block: 4 or 8 each
// Elements of each tile one invocation loads per step: BM * BK / 256, BN * BK / 256 (2 or 4).
const uint LA = BM / 32u, LB = BN / 32u;
shared float As[2][BK][BM];  // 2 x 8 x BM floats: 4 or 8 KiB
shared float Bs[2][BK][BN];

// Row (column) of the tile that register i of a block holds: 4 per run, runs 64 apart.
uint block_offset(uint t, uint i) { return (i / 4u) * 64u + 4u * t + i % 4u; }

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

  // What this invocation loads of each tile: L (LA or LB) elements consecutive in memory.
  //  k contiguous (a [M, K], b^T [N, K]): row tid / (BK / L), k (tid % (BK / L)) L + {0..L-1};
  //  row contiguous (a^T [K, M], b [K, N]): k tid / 32, column (tid % 32) L + {0..L-1}.
  const uint row_kc_a = tid / (BK / LA), k_kc_a = (tid % (BK / LA)) * LA;
  const uint row_kc_b = tid / (BK / LB), k_kc_b = (tid % (BK / LB)) * LB;
  const uint k_rc = tid / 32u, col_rc_a = (tid % 32u) * LA, col_rc_b = (tid % 32u) * LB;
  float ra[LA], rb[LB];

  float acc[TM][TN];
  [[unroll]] for (uint i = 0u; i < TM; ++i)
    [[unroll]] for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;

  uint cur = 0u;
  for (uint k0 = k_begin; k0 < k_end + BK; k0 += BK) {
    // Stage 1 (k0 < k_end): load the tile at k0 into registers.
    if (k0 < k_end) {
      if (ta) {
        const uint gk = k0 + k_rc, gm = m0 + col_rc_a;
        [[unroll]] for (uint i = 0u; i < LA; ++i)
          ra[i] = gk < k_end && gm + i < p.M ? a[abase + gk * p.lda + gm + i] : 0.0;
      } else {
        const uint gm = m0 + row_kc_a, gk = k0 + k_kc_a;
        [[unroll]] for (uint i = 0u; i < LA; ++i)
          ra[i] = gm < p.M && gk + i < k_end ? a[abase + gm * p.lda + gk + i] : 0.0;
      }
      if (tb) {
        const uint gn = n0 + row_kc_b, gk = k0 + k_kc_b;
        [[unroll]] for (uint i = 0u; i < LB; ++i)
          rb[i] = gn < p.N && gk + i < k_end ? b[bbase + gn * p.ldb + gk + i] : 0.0;
      } else {
        const uint gk = k0 + k_rc, gn = n0 + col_rc_b;
        [[unroll]] for (uint i = 0u; i < LB; ++i)
          rb[i] = gk < k_end && gn + i < p.N ? b[bbase + gk * p.ldb + gn + i] : 0.0;
      }
    }
    // Stage 2 (k0 > k_begin): the previous tile's FMAs, from buffer cur, while loads fly.
    if (k0 > k_begin) {
      [[unroll]] for (uint kk = 0u; kk < BK; ++kk) {
        float av[TM], bv[TN];
        [[unroll]] for (uint i = 0u; i < TM; ++i) av[i] = As[cur][kk][block_offset(ty, i)];
        [[unroll]] for (uint j = 0u; j < TN; ++j) bv[j] = Bs[cur][kk][block_offset(tx, j)];
        [[unroll]] for (uint i = 0u; i < TM; ++i)
          [[unroll]] for (uint j = 0u; j < TN; ++j) acc[i][j] += av[i] * bv[j];
      }
      cur ^= 1u;
    }
    // Stage 3: the loaded tile into the other buffer (last read before the previous barrier).
    if (k0 < k_end) {
      if (ta) {
        [[unroll]] for (uint i = 0u; i < LA; ++i) As[cur][k_rc][col_rc_a + i] = ra[i];
      } else {
        [[unroll]] for (uint i = 0u; i < LA; ++i) As[cur][k_kc_a + i][row_kc_a] = ra[i];
      }
      if (tb) {
        [[unroll]] for (uint i = 0u; i < LB; ++i) Bs[cur][k_kc_b + i][row_kc_b] = rb[i];
      } else {
        [[unroll]] for (uint i = 0u; i < LB; ++i) Bs[cur][k_rc][col_rc_b + i] = rb[i];
      }
    }
    barrier();
  }

  if (split) {
    [[unroll]] for (uint i = 0u; i < TM; ++i) {
      const uint m = m0 + block_offset(ty, i);
      [[unroll]] for (uint j = 0u; j < TN; ++j) {
        const uint n = n0 + block_offset(tx, j);
        if (m < p.M && n < p.N) o[p.oo + ((batch * p.M + m) * splits + part) * p.N + n] = acc[i][j];
      }
    }
    return;
  }
  const uint obase = p.oo + batch * p.stride_c;
  const bool has_bias = (p.flags & 4u) != 0u;
  float bv[TN];
  [[unroll]] for (uint j = 0u; j < TN; ++j) {
    const uint n = n0 + block_offset(tx, j);
    bv[j] = has_bias && n < p.N ? bias[p.obias + n] : 0.0;
  }
  [[unroll]] for (uint i = 0u; i < TM; ++i) {
    const uint m = m0 + block_offset(ty, i);
    [[unroll]] for (uint j = 0u; j < TN; ++j) {
      const uint n = n0 + block_offset(tx, j);
      const uint oi = obase + m * p.ldc + n;
      if (m < p.M && n < p.N) o[oi] = epilogue(p.alpha * acc[i][j] + bv[j], oi);
    }
  }
}
