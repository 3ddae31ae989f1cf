#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// The large-shape matmul: same semantics, bindings and push constants as matmul.comp
//   out = alpha * op(a) @ op(b) + bias, batched,
//   op(a)[m, k] = trans_a ? a[k * lda + m] : a[m * lda + k]   (+ batch * stride_a)
//   op(b)[k, n] = trans_b ? b[n * ldb + k] : b[k * ldb + n]   (+ batch * stride_b)
//   out[batch * stride_c + m * ldc + n]
// but 128x128 output tiles per workgroup of 256 invocations, each an 8x8 register block.
// Invocation (tx, ty) of a 16x16 grid owns rows {4ty..4ty+3, 64+4ty..64+4ty+3} and columns
// {4tx..4tx+3, 64+4tx..64+4tx+3}: four vec4s from shared memory feed 64 FMAs per k, the 16
// invocations of a row read 16 consecutive vec4s (no bank conflicts), and a row of stores
// covers 256 contiguous bytes (coalesced).
// k advances in steps of BK = 8 through two shared buffers, both k-major ([k][m] and [k][n])
// so the inner loop reads vec4s: while one buffer feeds the FMAs, the next tile is loaded
// from global memory into registers and stored into the other, so one barrier per step.
// Each invocation loads 4 consecutive elements (along the operand's stored rows) of each
// tile: one vec4 load where the host says it is aligned (flags 8, 16), otherwise 4 scalars.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer O4 { vec4 o4[]; };
layout(push_constant) uniform P {
  uint oa, ob, obias, oo;
  uint M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
  // 1: trans_a, 2: trans_b, 4: bias; vec4 access is legal (every element offset a multiple
  // of 4 and the binding 16-byte aligned) for 8: a, 16: b, 32: out.
  uint flags;
  float alpha;
  uint tile_n0, tile_m0, batch0;
} p;

const uint BM = 128u, BN = 128u, BK = 8u;
// [buffer][k][m / 4]: 2 * 8 * 128 floats each, 16 KiB in all (Vulkan's guaranteed minimum).
shared vec4 As[2][BK][BM / 4u];
shared vec4 Bs[2][BK][BN / 4u];

// Four consecutive elements of a stored operand row: x[base + i], i = 0..3, of which only
// the first `valid` exist (0..4). One vec4 load when whole and aligned.
vec4 load_a(uint base, uint valid, bool vec) {
  if (vec && valid == 4u) return a4[base >> 2];
  vec4 v = vec4(0.0);
  [[unroll]] for (uint i = 0u; i < 4u; ++i)
    if (i < valid) v[i] = a[base + i];
  return v;
}
vec4 load_b(uint base, uint valid, bool vec) {
  if (vec && valid == 4u) return b4[base >> 2];
  vec4 v = vec4(0.0);
  [[unroll]] for (uint i = 0u; i < 4u; ++i)
    if (i < valid) v[i] = b[base + i];
  return v;
}

// How many of the 4 elements from index `first` on lie below `limit` (0 when `ok` is false).
uint valid4(bool ok, uint first, uint limit) {
  return ok && first < limit ? min(limit - first, 4u) : 0u;
}

// Per-invocation state shared by the tile helpers below (set once at the top of main).
uint m0, n0, abase, bbase;
bool ta, tb, va, vb;
// What this invocation loads of each 128x8 (or 8x128) tile, by how the operand is stored:
//  k contiguous (a: [M, K], b: [N, K] transposed): row tid / 2, k (tid % 2) * 4 .. + 3;
//  m/n contiguous (a: [K, M] transposed, b: [K, N]): k tid / 32, column (tid % 32) * 4 .. + 3.
uint row_kc, k_kc, k_mc, col_mc;
vec4 ra, rb;  // the next tile's elements, between global and shared memory

// Global -> registers: the tiles of a and b starting at k0.
void load_tile(uint k0) {
  if (ta) {
    const uint gk = k0 + k_mc, gm = m0 + col_mc;
    ra = load_a(abase + gk * p.lda + gm, valid4(gk < p.K, gm, p.M), va);
  } else {
    const uint gm = m0 + row_kc, gk = k0 + k_kc;
    ra = load_a(abase + gm * p.lda + gk, valid4(gm < p.M, gk, p.K), va);
  }
  if (tb) {
    const uint gn = n0 + row_kc, gk = k0 + k_kc;
    rb = load_b(bbase + gn * p.ldb + gk, valid4(gn < p.N, gk, p.K), vb);
  } else {
    const uint gk = k0 + k_mc, gn = n0 + col_mc;
    rb = load_b(bbase + gk * p.ldb + gn, valid4(gk < p.K, gn, p.N), vb);
  }
}

// Registers -> shared buffer s, k-major (the k-contiguous layouts scatter 4 scalars).
void store_tile(uint s) {
  if (ta) {
    As[s][k_mc][col_mc / 4u] = ra;
  } else {
    [[unroll]] for (uint i = 0u; i < 4u; ++i) As[s][k_kc + i][row_kc / 4u][row_kc % 4u] = ra[i];
  }
  if (tb) {
    [[unroll]] for (uint i = 0u; i < 4u; ++i) Bs[s][k_kc + i][row_kc / 4u][row_kc % 4u] = rb[i];
  } else {
    Bs[s][k_mc][col_mc / 4u] = rb;
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % 16u, ty = tid / 16u;
  n0 = (gl_WorkGroupID.x + p.tile_n0) * BN;
  m0 = (gl_WorkGroupID.y + p.tile_m0) * BM;
  const uint batch = gl_WorkGroupID.z + p.batch0;
  ta = (p.flags & 1u) != 0u;
  tb = (p.flags & 2u) != 0u;
  va = (p.flags & 8u) != 0u;
  vb = (p.flags & 16u) != 0u;
  abase = p.oa + batch * p.stride_a;
  bbase = p.ob + batch * p.stride_b;
  row_kc = tid / 2u;
  k_kc = (tid % 2u) * 4u;
  k_mc = tid / 32u;
  col_mc = (tid % 32u) * 4u;

  // acc[i][h]: row (i < 4 ? 4ty + i : 64 + 4ty + i - 4), columns 4tx + 64h .. + 3.
  vec4 acc[8][2];
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    acc[i][0] = vec4(0.0);
    acc[i][1] = vec4(0.0);
  }

  load_tile(0u);
  store_tile(0u);
  barrier();
  uint cur = 0u;
  for (uint k0 = 0u; k0 < p.K; k0 += BK) {
    const bool more = k0 + BK < p.K;
    if (more) load_tile(k0 + BK);  // in flight during the FMAs below
    [[unroll]] for (uint kk = 0u; kk < BK; ++kk) {
      const vec4 a_lo = As[cur][kk][ty], a_hi = As[cur][kk][16u + ty];
      const vec4 b_lo = Bs[cur][kk][tx], b_hi = Bs[cur][kk][16u + tx];
      [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        acc[i][0] += a_lo[i] * b_lo;
        acc[i][1] += a_lo[i] * b_hi;
        acc[4u + i][0] += a_hi[i] * b_lo;
        acc[4u + i][1] += a_hi[i] * b_hi;
      }
    }
    // The other buffer was last read before the previous barrier: free to overwrite.
    if (more) store_tile(cur ^ 1u);
    barrier();
    cur ^= 1u;
  }

  const uint obase = p.oo + batch * p.stride_c;
  const bool has_bias = (p.flags & 4u) != 0u, vo = (p.flags & 32u) != 0u;
  [[unroll]] for (uint h = 0u; h < 2u; ++h) {
    const uint n = n0 + 64u * h + 4u * tx;
    if (n >= p.N) continue;
    const uint valid = min(p.N - n, 4u);
    vec4 add = vec4(0.0);
    if (has_bias)
      [[unroll]] for (uint j = 0u; j < 4u; ++j)
        if (j < valid) add[j] = bias[p.obias + n + j];
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
      const uint m = m0 + (i < 4u ? 4u * ty + i : 64u + 4u * ty + i - 4u);
      if (m >= p.M) continue;
      const vec4 v = p.alpha * acc[i][h] + add;
      const uint at = obase + m * p.ldc + n;
      if (vo && valid == 4u) {
        o4[at >> 2] = v;
      } else {
        [[unroll]] for (uint j = 0u; j < 4u; ++j)
          if (j < valid) o[at + j] = v[j];
      }
    }
  }
}
