#version 450
#extension GL_GOOGLE_include_directive : require
// matmul_add_layernorm_matmul for one row in one dispatch (the seam between two pre-norm
// sublayers of a decode step):
//   phase 1: x_out = x_in + (a @ W1 + b1)                 gemv_n's work, 8 columns of N1
//   phase 2: out = epilogue(layernorm(x_out) @ W2 + b2)    gemv_n_ln's, 8 columns of N2
// with the same sums in the same order as those two kernels: the same bits.
//
// Workgroups [0, groups1) do phase 1; each writes its 8 columns of x_out and counts itself.
// Workgroups [groups1, groups1 + groups2) do phase 2: they poll the phase-1 count until
// every phase-1 group has counted itself. Vulkan promises nothing about workgroups running
// at the same time, so the poll is bounded: a workgroup that gives up computes x_out
// itself, the same sums in the same order, into shared memory (x_in is never written by
// the dispatch). No workgroup ever depends on another making progress; on a GPU that runs
// the dispatch's workgroups together the poll ends when phase 1 does. Flag 32 (tests)
// makes every phase-2 workgroup compute x_out itself.
//
// Memory order: a phase-1 workgroup writes x_out, then (memoryBarrierBuffer, barrier) counts
// itself; a phase-2 workgroup that reads the full count orders its x_out reads after it with
// memoryBarrierBuffer (both buffers coherent). Every workgroup counts itself once more when
// done; the last of all resets both counters to 0 for the next dispatch (no workgroup can
// still be polling then). The counters: the work buffer's [ow + kCounters - 4, + 2), apart
// from the per-row counters other kernels keep at its start.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#include "common.glsl"
#include "reduce.glsl"
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
layout(std430, binding = 10) coherent buffer W { uint w[]; };
layout(push_constant) uniform P {
  uint oa1, ob1, obias1, oxin, oxout, ob2, obias2, oo2, ogamma, obeta, ow;
  uint N1, K1, N2;
  uint flags2;  // 4: bias b2, 8: gelu, 32: phase 2 never polls (tests)
  float eps;
  uint groups1, groups2;
} p;

const uint kPairs = 128u;
const uint kUnroll = 8u;
const uint kPolls = 16384u;  // ~ms on a GPU, below lavapipe's 65535 iterations a loop
const uint kFlagSolo = 32u;
const uint kCounters = 16384u;  // VulkanBackend's kWorkCounters
shared float part[kPairs][8];
shared float part2[32][8];
shared float part3[8][8];
shared float xs[2048];
shared uint flag;

const uint kPhase1Done = kCounters - 4u, kAllDone = kCounters - 3u;  // offsets from ow

// t == 0: polls the phase-1 count until every phase-1 workgroup is in it (at most kPolls
// reads; none with flag 32); every invocation: whether it came. Relaxed atomic loads: plain
// loads that reach L2 (a poll by atomic add would contend with the adds it waits for, and
// spirv-opt deletes a loop of volatile loads).
bool wait_for_phase1() {
  const uint t = gl_LocalInvocationID.x;
  if (t == 0u) {
    uint done = 0u;
    if ((p.flags2 & kFlagSolo) == 0u)
      for (uint k = 0u; k < kPolls; ++k) {
        done = atomicLoad(w[p.ow + kPhase1Done], gl_ScopeDevice, gl_StorageSemanticsBuffer,
                          gl_SemanticsRelaxed);
        if (done >= p.groups1) break;
      }
    flag = done >= p.groups1 ? 1u : 0u;
  }
  barrier();
  const bool ready = flag != 0u;
  memoryBarrierBuffer();
  return ready;
}

// Counts this workgroup as done; the last of the dispatch resets the counters.
void finish() {
  barrier();
  if (gl_LocalInvocationID.x == 0u &&
      atomicAdd(w[p.ow + kAllDone], 1u) == p.groups1 + p.groups2 - 1u) {
    w[p.ow + kPhase1Done] = 0u;
    w[p.ow + kAllDone] = 0u;
  }
}

// The sum over the workgroup's 128 pairs of column t (t < 8), in gemv_n's fixed order.
float column_sum(vec4 acc, uint t, uint q, uint half_) {
  barrier();  // part[] may still be read by a previous call
  [[unroll]] for (uint c = 0u; c < 4u; ++c) part[q][4u * half_ + c] = acc[c];
  barrier();
  const uint col = t & 7u, g = t >> 3u;
  part2[g][col] = ((part[4u * g][col] + part[4u * g + 1u][col]) + part[4u * g + 2u][col]) +
                  part[4u * g + 3u][col];
  barrier();
  if (g < 8u)
    part3[g][col] = ((part2[4u * g][col] + part2[4u * g + 1u][col]) + part2[4u * g + 2u][col]) +
                    part2[4u * g + 3u][col];
  barrier();
  float s = 0.0;
  if (t < 8u)
    [[unroll]] for (uint j = 0u; j < 8u; ++j) s += part3[j][t];
  return s;
}

// Column n0 + t (t < 8) of x_in + (a @ W1 + b1), as gemv_n with accumulate computes it.
// Every invocation must call it (barriers); the value is meaningful for t < 8.
float phase1_column(uint n0, uint t, uint q, uint half_) {
  const uint n = n0 + 4u * half_;
  const uint step = kPairs * kUnroll;
  vec4 acc = vec4(0.0);
  if (n + 4u <= p.N1) {
    const uint base4 = (p.ob1 + n) / 4u, ldb4 = p.N1 / 4u;
    for (uint k = q; k < p.K1; k += step) {
      vec4 bv[kUnroll];
      float av[kUnroll];
      [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
        const uint ku = k + u * kPairs;
        bv[u] = ku < p.K1 ? b1v[base4 + ku * ldb4] : vec4(0.0);
        av[u] = ku < p.K1 ? a1[p.oa1 + ku] : 0.0;
      }
      [[unroll]] for (uint u = 0u; u < kUnroll; ++u) acc += av[u] * bv[u];
    }
  }
  const float s = column_sum(acc, t, q, half_);
  if (t >= 8u || n0 + t >= p.N1) return 0.0;
  return (s + bias1[p.obias1 + n0 + t]) + x_in[p.oxin + n0 + t];
}

// xs = layernorm(x_out) with x_out read from the buffer (ready) or from xs, where the
// caller computed it: layernorm.comp's sums in its order (j = t, t + 256, ...).
void normalize_into_xs(bool ready, uint t) {
  const uint K = p.N1;
  float xv[8], gv[8], be[8];
  [[unroll]] for (uint u = 0u; u < 8u; ++u) {
    const uint j = t + 256u * u;
    xv[u] = j < K ? (ready ? x_out[p.oxout + j] : xs[j]) : 0.0;
    gv[u] = j < K ? gamma[p.ogamma + j] : 0.0;
    be[u] = j < K ? beta[p.obeta + j] : 0.0;
  }
  float s = 0.0;
  [[unroll]] for (uint u = 0u; u < 8u; ++u)
    if (t + 256u * u < K) s += xv[u];
  const float mean = wg_sum(s) / float(K);  // wg_sum's barriers order the xs reads above
  float q2 = 0.0;
  [[unroll]] for (uint u = 0u; u < 8u; ++u) {
    const float d = xv[u] - mean;
    if (t + 256u * u < K) q2 += d * d;
  }
  const float rstd = 1.0 / sqrt(wg_sum(q2) / float(K) + p.eps);
  [[unroll]] for (uint u = 0u; u < 8u; ++u)
    if (t + 256u * u < K) xs[t + 256u * u] = (xv[u] - mean) * rstd * gv[u] + be[u];
  barrier();
}

// xs = layernorm(x_out), x_out from phase 1's workgroups or, if they are not done in time,
// computed here.
void normalized_row(uint t, uint q, uint half_) {
  const bool ready = wait_for_phase1();
  if (!ready) {
    for (uint g = 0u; g * 8u < p.N1; ++g) {
      const float v = phase1_column(g * 8u, t, q, half_);
      if (t < 8u && g * 8u + t < p.N1) xs[g * 8u + t] = v;
    }
    barrier();
  }
  normalize_into_xs(ready, t);
}

// The rows of W2 a phase-2 column group's invocation multiplies in the step at row k.
void load_w2(uint n0, uint k, uint q, uint half_, out vec4 bv[kUnroll]) {
  const uint n = n0 + 4u * half_, K = p.N1;
  const bool wide = n + 4u <= p.N2;
  const uint base4 = (p.ob2 + n) / 4u, ldb4 = p.N2 / 4u;
  [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
    const uint ku = k + u * kPairs;
    bv[u] = wide && ku < K ? b2v[base4 + ku * ldb4] : vec4(0.0);
  }
}

// Column n0 + t (t < 8) of epilogue(xs @ W2 + b2), as gemv_n_ln computes it. Every
// invocation must call it (barriers); the value is meaningful for t < 8.
float phase2_column(uint n0, uint t, uint q, uint half_) {
  const uint K = p.N1, step = kPairs * kUnroll;
  vec4 acc = vec4(0.0);
  for (uint k = q; k < K; k += step) {
    vec4 bv[kUnroll];
    load_w2(n0, k, q, half_, bv);
    float av[kUnroll];
    [[unroll]] for (uint u = 0u; u < kUnroll; ++u) {
      const uint ku = k + u * kPairs;
      av[u] = ku < K ? xs[ku] : 0.0;
    }
    [[unroll]] for (uint u = 0u; u < kUnroll; ++u) acc += av[u] * bv[u];
  }
  const float s = column_sum(acc, t, q, half_);
  if (t >= 8u || n0 + t >= p.N2) return 0.0;
  float v = s;
  if ((p.flags2 & 4u) != 0u) v += bias2[p.obias2 + n0 + t];
  if ((p.flags2 & 8u) != 0u) v = gelu_tanh(v);
  return v;
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint q = t >> 1u, half_ = t & 1u;
  const uint item = flat_group();
  if (item < p.groups1) {
    const uint n0 = item * 8u;
    const float v = phase1_column(n0, t, q, half_);
    if (t < 8u && n0 + t < p.N1) x_out[p.oxout + n0 + t] = v;
    // x_out's columns written, then counted.
    memoryBarrierBuffer();
    barrier();
    if (t == 0u) atomicAdd(w[p.ow + kPhase1Done], 1u);
  } else {
    const uint n0 = (item - p.groups1) * 8u;
    // W2's rows are loaded after the layernorm. Loaded before it (before or right after the
    // poll: 32 more registers live through it), the dispatch took 17.0 / 18.0 us on the
    // H200 against 15.6.
    normalized_row(t, q, half_);
    const float v = phase2_column(n0, t, q, half_);
    if (t < 8u && n0 + t < p.N2) o2[p.oo2 + n0 + t] = v;
  }
  finish();
}
