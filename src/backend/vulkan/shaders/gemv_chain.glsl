// The body of gemv_chain.comp and gemv_chain_preload.comp (CHAIN_PRELOAD_W2: rows of
// N1 <= 768, whose W2 values a phase-2 invocation holds in registers).
// matmul_add_layernorm_matmul for one row in one dispatch with f32 weights [K, N] (the seam
// between two pre-norm sublayers of a decode step):
//   phase 1: x_out = x_in + (a @ W1 + b1)                 gemv_n's work, 16 (8) columns of N1
//   phase 2: out = epilogue(layernorm(x_out) @ W2 + b2)    gemv_n_ln's, 16 columns of N2
// with the same sums in the same order as those two kernels: the same bits. Workgroups
// [0, groups1) do phase 1, the others phase 2; how phase 2 waits for phase 1 (or computes
// x_out itself) is chain_sync.glsl.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#include "common.glsl"
#include "gelu.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A1 { float a1[]; };
layout(std430, binding = 1) readonly buffer B1 { vec4 b1v[]; };
layout(std430, binding = 2) readonly buffer Bias1 { float bias1[]; };
layout(std430, binding = 3) readonly buffer XIn { float x_in[]; };
layout(std430, binding = 4) coherent buffer XOut { float x_out[]; };
layout(std430, binding = 5) readonly buffer B2 { vec4 b2v[]; };
layout(std430, binding = 6) readonly buffer Bias2 { float bias2[]; };
layout(std430, binding = 7) writeonly buffer O2 { float o2[]; };
layout(std430, binding = 8) readonly buffer Gamma { float gamma[]; };
layout(std430, binding = 9) readonly buffer Beta { float beta[]; };
layout(std430, binding = 10) buffer W { uint w[]; };  // atomics only
layout(push_constant) uniform P {
  uint oa1, ob1, obias1, oxin, oxout, ob2, obias2, oo2, ogamma, obeta, ow;
  uint N1, K1, N2;
  uint flags2;  // 4: bias b2, 8: gelu, 32: phase 2 never polls (tests), 64: phase 1 narrow
  float eps;
  uint groups1, groups2;
} p;

#ifdef CHAIN_PRELOAD_W2
// Rows of at most 768: the layernorm holds 3 elements per invocation instead of 8, and
// phase 2 loads all its rows of W2 (6 per invocation, 48 registers) before the poll.
const uint kRowMax = 768u, kLnSlots = 3u, kPrefetch = 6u;
#else
const uint kRowMax = 2048u, kLnSlots = 8u;
#endif
const uint kPairs = 128u;
const uint kUnroll = 8u;
const uint kFlagNarrow = 64u;
shared float p16[kPairs][16];  // column_sum16: [pair][column] of a workgroup's 16 columns
shared float p16b[32][16];
shared float p16c[8][16];
#include "chain_sync.glsl"

// Both phases: a workgroup owns 16 columns; invocation (q, h) (pair q = t / 2, h = t % 2)
// takes columns n0 + 8h .. n0 + 8h + 7 (two vec4 loads a row) of rows q, q + 128, ... Per
// column that is gemv_n's and gemv_n_ln's mapping (their 8-column groups: the same rows,
// added in the same order by pair q), and column_sum16 adds the pairs' sums in their order:
// the same bits. 16 columns, not 8: half the workgroups, so that all of a dispatch's fit on
// a GPU at once although phase 2 holds its rows of W2 in registers: with CHAIN_PRELOAD_W2
// all of them (at most 6), loaded before the poll. They arrive while phase 1 runs, and the
// product after the layernorm waits on no memory (the H200's figures: docs/PERFORMANCE.md,
// "Measurements that shaped the kernels").

// Row ku's two vec4 of columns n .. n + 7 (zeros past N1 and N2; N2 % 4 == 0).
void load_w2_row(uint n, uint ku, out vec4 lo, out vec4 hi) {
  const uint base4 = (p.ob2 + n) / 4u + ku * (p.N2 / 4u);
  const bool in_k = ku < p.N1;
  lo = in_k && n + 4u <= p.N2 ? b2v[base4] : vec4(0.0);
  hi = in_k && n + 8u <= p.N2 ? b2v[base4 + 1u] : vec4(0.0);
}

// The sum over the 128 pairs of column t (t < 16) of the workgroup's 16, in gemv_n's
// fixed order (128 -> 32 -> 8 -> 1 per column).
float column_sum16(vec4 lo, vec4 hi, uint t, uint q, uint h) {
  [[unroll]] for (uint c = 0u; c < 4u; ++c) {
    p16[q][8u * h + c] = lo[c];
    p16[q][8u * h + 4u + c] = hi[c];
  }
  barrier();
  [[unroll]] for (uint r = 0u; r < 2u; ++r) {
    const uint e = t + 256u * r, col = e & 15u, g = e >> 4u;
    p16b[g][col] = ((p16[4u * g][col] + p16[4u * g + 1u][col]) + p16[4u * g + 2u][col]) +
                   p16[4u * g + 3u][col];
  }
  barrier();
  if (t < 128u) {
    const uint col = t & 15u, g = t >> 4u;
    p16c[g][col] = ((p16b[4u * g][col] + p16b[4u * g + 1u][col]) + p16b[4u * g + 2u][col]) +
                   p16b[4u * g + 3u][col];
  }
  barrier();
  float s = 0.0;
  if (t < 16u)
    [[unroll]] for (uint j = 0u; j < 8u; ++j) s += p16c[j][t];
  return s;
}

// Phase 1 of the workgroup owning columns n0 .. n0 + 15 of N1 (the mapping of phase 2's
// workgroups, on W1 and a), or with flag 64 (narrow; the host sets it for long rows of W1,
// whose loads want more workgroups) n0 .. n0 + 7: invocation h then takes n0 + 4h .. + 3, in
// lo, and hi stays 0. Column col (set where mine) of x_in + (a @ W1 + b1), as gemv_n with
// accumulate computes it.
float phase1(uint n0, uint t, uint q, uint h, out bool mine, out uint col) {
  const bool narrow = (p.flags2 & kFlagNarrow) != 0u;
  // Invocation t < 16 gets sum t of column_sum16: pair sums of column 8h + c of lo and hi.
  col = narrow ? n0 + (t & 3u) + 4u * (t >> 3u) : n0 + t;
  mine = t < 16u && (!narrow || (t & 4u) == 0u) && col < p.N1;
  // The epilogue's operands are loaded first: in flight during the product.
  const float e_bias = mine ? bias1[p.obias1 + col] : 0.0;
  const float e_x = mine ? x_in[p.oxin + col] : 0.0;
  const uint n = n0 + (narrow ? 4u : 8u) * h, base4 = (p.ob1 + n) / 4u, ldb4 = p.N1 / 4u;
  const bool wide_lo = n + 4u <= p.N1, wide_hi = !narrow && n + 8u <= p.N1;
  vec4 lo = vec4(0.0), hi = vec4(0.0);
  for (uint k = q; k < p.K1; k += kPairs * kUnroll) {
    vec4 bl[kUnroll], bh[kUnroll];
    float av[kUnroll];
    [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
      const uint ku = k + u * kPairs, row = base4 + ku * ldb4;
      bl[u] = wide_lo && ku < p.K1 ? b1v[row] : vec4(0.0);
      bh[u] = wide_hi && ku < p.K1 ? b1v[row + 1u] : vec4(0.0);
      av[u] = ku < p.K1 ? a1[p.oa1 + ku] : 0.0;
    }
    [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
      lo += av[u] * bl[u];
      hi += av[u] * bh[u];
    }
  }
  const float s = column_sum16(lo, hi, t, q, h);
  return mine ? (s + e_bias) + e_x : 0.0;
}

// xs = x_out computed here (a phase-2 workgroup that gave up waiting): phase 1 for all of N1,
// one row at a time (few registers: the workgroup holds its rows of W2 meanwhile), the same
// sums in the same order. W1's loads are written out here and in phase1() rather than
// shared through a row loader like load_w2_row, which made the chains slower on the H200
// (docs/PERFORMANCE.md, "Measurements that shaped the kernels").
void x_out_into_xs(uint t, uint q, uint h) {
  for (uint n0 = 0u; n0 < p.N1; n0 += 16u) {
    const uint n = n0 + 8u * h, base4 = (p.ob1 + n) / 4u, ldb4 = p.N1 / 4u;
    const bool wide_lo = n + 4u <= p.N1, wide_hi = n + 8u <= p.N1;
    vec4 lo = vec4(0.0), hi = vec4(0.0);
    for (uint k = q; k < p.K1; k += kPairs) {
      const float av = a1[p.oa1 + k];
      lo += av * (wide_lo ? b1v[base4 + k * ldb4] : vec4(0.0));
      hi += av * (wide_hi ? b1v[base4 + k * ldb4 + 1u] : vec4(0.0));
    }
    barrier();  // the previous group's sums are read
    const float s = column_sum16(lo, hi, t, q, h);
    if (t < 16u && n0 + t < p.N1)
      xs[n0 + t] = (s + bias1[p.obias1 + n0 + t]) + x_in[p.oxin + n0 + t];
  }
  barrier();
}

// Phase 2 of the workgroup owning columns n0 .. n0 + 15; returns column n0 + t (t < 16)
// of epilogue(layernorm(x_out) @ W2 + b2), as gemv_n_ln computes it.
float phase2(uint n0, uint t, uint q, uint h, out bool ready) {
  const uint n = n0 + 8u * h, K = p.N1;
  const bool mine = t < 16u && n0 + t < p.N2;
  const float e_bias = mine && (p.flags2 & 4u) != 0u ? bias2[p.obias2 + n0 + t] : 0.0;
  vec4 lo = vec4(0.0), hi = vec4(0.0);
#ifdef CHAIN_PRELOAD_W2
  vec4 pre_lo[kPrefetch], pre_hi[kPrefetch];
  [[unroll]] for (uint u = 0u; u < kPrefetch; ++u)
    load_w2_row(n, q + u * kPairs, pre_lo[u], pre_hi[u]);
  ready = wait_for_phase1();
  if (!ready) x_out_into_xs(t, q, h);
  normalize_into_xs(ready, t);
  // gemv_n_ln's one step of kUnroll rows for K <= 768; its rows 6 and 7 are past K and add
  // zeros (left out here).
  [[unroll]] for (uint u = 0u; u < kPrefetch; ++u) {
    const uint ku = q + u * kPairs;
    const float av = ku < K ? xs[ku] : 0.0;
    lo += av * pre_lo[u];
    hi += av * pre_hi[u];
  }
#else
  ready = wait_for_phase1();
  if (!ready) x_out_into_xs(t, q, h);
  normalize_into_xs(ready, t);
  // gemv_n_ln's steps of kUnroll rows (rows past K add zeros), loaded 4 rows at a time.
  for (uint k = q; k < K; k += kPairs * kUnroll) {
    [[unroll]] for (uint half_step = 0u; half_step < 2u; ++half_step) {
      vec4 bl[kUnroll / 2u], bh[kUnroll / 2u];
      float av[kUnroll / 2u];
      [[unroll]] for (uint v = 0u; v < kUnroll / 2u; ++v) {
        const uint ku = k + (half_step * (kUnroll / 2u) + v) * kPairs;
        load_w2_row(n, ku, bl[v], bh[v]);
        av[v] = ku < K ? xs[ku] : 0.0;
      }
      [[unroll]] for (uint v = 0u; v < kUnroll / 2u; ++v) {
        lo += av[v] * bl[v];
        hi += av[v] * bh[v];
      }
    }
  }
#endif
  const float s = column_sum16(lo, hi, t, q, h);
  float v = s;
  if ((p.flags2 & 4u) != 0u) v += e_bias;
  if ((p.flags2 & 8u) != 0u) v = gelu_tanh(v);
  return v;
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint q = t >> 1u, h = t & 1u;
  const uint item = flat_group();
  bool recomputed = false;
  if (item < p.groups1) {
    const uint n0 = item * ((p.flags2 & kFlagNarrow) != 0u ? 8u : 16u);
    bool mine;
    uint col;
    const float v = phase1(n0, t, q, h, mine, col);
    if (mine) x_out[p.oxout + col] = v;
    // Every invocation's store, then invocation 0's release.
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer,
                   gl_SemanticsAcquireRelease);
    if (t == 0u)
      atomicAdd(w[p.ow + kPhase1Done], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                gl_SemanticsRelease);
  } else {
    const uint n0 = (item - p.groups1) * 16u;
    bool ready;
    const float v = phase2(n0, t, q, h, ready);
    recomputed = !ready;
    if (t < 16u && n0 + t < p.N2) o2[p.oo2 + n0 + t] = v;
  }
  finish(recomputed);
}
