// The body of gemv_n.comp and gemv_n_ln.comp (GEMV_LN defined). Matrix-vector product for M = 1 with b stored [K, N] (not transposed): the decode step's
// x @ W with W [C_in, C_out] (GPT-2: K x N = 768 x 2304, 768 x 768, 768 x 3072, 3072 x 768).
//
// A workgroup of 256 invocations owns 8 output columns and walks all of k, so N / 8 columns
// give a GPU enough workgroups on their own (96-384 for GPT-2) and the product is one
// dispatch, epilogue included (alpha, bias, then matmul_epilogue.glsl's gelu / accumulate).
// Invocations pair up: pair q (0..127) takes rows k = q, q + 128, ...; in each row its two
// invocations read 4 columns each, together the row's 8 columns = 32 bytes, as one vec4 load
// each when the columns are 16-byte aligned (N % 4 == 0 and aligned view offsets), else as
// scalars. The k loop is unrolled so that several rows' loads are in flight at once. The 128
// partial sums of a column are then added in shared memory in a fixed order (32 groups of
// 4, then 8 groups of 4, then 8): deterministic, no atomics.
//
// Same push constants as matmul.comp. With flags & 64 (split k; only for few columns and a
// long k, see VulkanBackend::gemm) workgroup row y covers k in [y k_split, (y + 1) k_split)
// and writes its raw sum to o[(batch * splits + y) * N + n] for split_k_reduce.comp.
//
// GEMV_LN (gemv_n_ln.comp, VulkanBackend::layernorm_matmul): a is first normalized, by every
// workgroup, into shared memory: a' = (a - mean) * rstd * gamma + beta over its K <= 2048
// elements (bindings 4 and 5, eps after k_split), computed exactly as layernorm.comp does
// (same sums in the same order), so the product equals layernorm then gemv_n. It saves a
// decode step the layernorm dispatch before each of its qkv and fc products.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 1) readonly buffer B4 { vec4 b4[]; };  // the same binding, as vec4
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer O { float o[]; };  // read too with accumulate
#ifdef GEMV_LN
layout(std430, binding = 4) readonly buffer Gamma { float gamma[]; };
layout(std430, binding = 5) readonly buffer Beta { float beta[]; };
#endif
layout(push_constant) uniform P {
  uint oa, ob, obias, oo;
#ifdef GEMV_LN
  uint ogamma, obeta;
#endif
  uint M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
  uint flags;  // 1: trans_a, 2: trans_b (not here), 4: bias, 8: gelu, 16: accumulate, 64: split
  float alpha;
  uint tile_n0, tile_m0, batch0;
  uint k_split;
#ifdef GEMV_LN
  float eps;
#endif
} p;
#include "matmul_epilogue.glsl"

const uint kPairs = 128u;  // rows of b read at once by a workgroup
const uint kUnroll = 8u;   // rows per pair per loop step (loads in flight)

shared float part[kPairs][8];  // [pair][column]: one vec4 per invocation
shared float part2[32][8];     // sums of 4 pairs
shared float part3[8][8];      // sums of 16 pairs

#ifdef GEMV_LN
#include "reduce.glsl"
shared float xs[2048];  // the normalized row
#define A(k) xs[k]
#else
#define A(k) a[abase + (k) * astep]
#endif

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint q = t >> 1u, half_ = t & 1u;
  const uint n0 = (gl_WorkGroupID.x + p.tile_n0) * 8u;
  const uint n = n0 + 4u * half_;  // this invocation's first column
  const uint batch = gl_WorkGroupID.z + p.batch0;
  const uint abase = p.oa + batch * p.stride_a;
  const uint bbase = p.ob + batch * p.stride_b;
  // op(a)[0, k]: a stored [1, K] (step 1) or, transposed, [K, 1] (step lda).
  const uint astep = (p.flags & 1u) != 0u ? p.lda : 1u;
  const bool split = (p.flags & 64u) != 0u;
  const uint k_begin = split ? gl_WorkGroupID.y * p.k_split : 0u;
  const uint k_end = split ? min(k_begin + p.k_split, p.K) : p.K;

  vec4 acc = vec4(0.0);
  const bool wide = bbase % 4u == 0u && p.ldb % 4u == 0u && n + 4u <= p.N;
  const uint step = kPairs * kUnroll;
  // Row k's 4 columns are b4[(bbase + k ldb + n) / 4].
  const uint ldb4 = p.ldb / 4u, base4 = (bbase + n) / 4u;
  uint k = k_begin + q;
  // Every step issues kUnroll rows' loads at once, the rows past k_end predicated off
  // (zeros), so that a short k (GPT-2: 768) waits on memory once, not once per row. The
  // first step's rows are loaded before anything else: with GEMV_LN they are in flight
  // while the workgroup normalizes a.
  vec4 bv[kUnroll];
  if (wide) {
    [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
      const uint ku = k + u * kPairs;
      bv[u] = ku < k_end ? b4[base4 + ku * ldb4] : vec4(0.0);
    }
  }

#ifdef GEMV_LN
  {
    // a's K <= 2048 elements, gamma and beta: 8 per invocation, loaded at once.
    float xv[8], gv[8], be[8];
    [[unroll]] for (uint u = 0u; u < 8u; ++u) {
      const uint j = t + 256u * u;
      xv[u] = j < p.K ? a[abase + j] : 0.0;
      gv[u] = j < p.K ? gamma[p.ogamma + j] : 0.0;
      be[u] = j < p.K ? beta[p.obeta + j] : 0.0;
    }
    // layernorm.comp's sums, in its order (j = t, t + 256, ...).
    float s = 0.0;
    [[unroll]] for (uint u = 0u; u < 8u; ++u)
      if (t + 256u * u < p.K) s += xv[u];
    const float mean = wg_sum(s) / float(p.K);
    float q2 = 0.0;
    [[unroll]] for (uint u = 0u; u < 8u; ++u) {
      const float d = xv[u] - mean;
      if (t + 256u * u < p.K) q2 += d * d;
    }
    const float rstd = 1.0 / sqrt(wg_sum(q2) / float(p.K) + p.eps);
    [[unroll]] for (uint u = 0u; u < 8u; ++u)
      if (t + 256u * u < p.K) xs[t + 256u * u] = (xv[u] - mean) * rstd * gv[u] + be[u];
    barrier();
  }
#endif
  if (wide) {
    for (; k < k_end; k += step) {
      if (k != k_begin + q) {
        [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
          const uint ku = k + u * kPairs;
          bv[u] = ku < k_end ? b4[base4 + ku * ldb4] : vec4(0.0);
        }
      }
      float av[kUnroll];
      [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
        const uint ku = k + u * kPairs;
        av[u] = ku < k_end ? A(ku) : 0.0;
      }
      [[unroll]] for (uint u = 0u; u < kUnroll; ++u) acc += av[u] * bv[u];
    }
  } else {
    // Odd N, unaligned views or the last partial column group: scalars, bounds-checked.
    for (; k < k_end; k += kPairs) {
      const float av = A(k);
      const uint row = bbase + k * p.ldb;
      [[unroll]] for (uint c = 0u; c < 4u; ++c)
        if (n + c < p.N) acc[c] += av * b[row + n + c];
    }
  }
  [[unroll]] for (uint c = 0u; c < 4u; ++c) part[q][4u * half_ + c] = acc[c];
  barrier();

  // Fixed-order reduction of the 128 pair sums of each column: 128 -> 32 -> 8 -> 1.
  const uint col = t & 7u, g = t >> 3u;  // g: 0..31
  part2[g][col] = ((part[4u * g][col] + part[4u * g + 1u][col]) + part[4u * g + 2u][col]) +
                  part[4u * g + 3u][col];
  barrier();
  if (g < 8u)
    part3[g][col] = ((part2[4u * g][col] + part2[4u * g + 1u][col]) + part2[4u * g + 2u][col]) +
                    part2[4u * g + 3u][col];
  barrier();
  if (t >= 8u || n0 + t >= p.N) return;
  float s = 0.0;
  [[unroll]] for (uint j = 0u; j < 8u; ++j) s += part3[j][t];
  const uint nt = n0 + t;
  if (split) {
    o[p.oo + (batch * gl_NumWorkGroups.y + gl_WorkGroupID.y) * p.N + nt] = s;
    return;
  }
  float v = p.alpha * s;
  if ((p.flags & 4u) != 0u) v += bias[p.obias + nt];
  const uint oi = p.oo + batch * p.stride_c + nt;
  o[oi] = epilogue(v, oi);
}
