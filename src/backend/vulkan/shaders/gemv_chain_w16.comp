#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
// matmul_add_layernorm_matmul for one row in one dispatch with f16 / bf16 weights (flag 2:
// bf16) stored [out, in] and used transposed, W1 [N1, K1] and W2 [N2, N1]:
//   phase 1: x_out = x_in + (a @ W1^T + b1)                16 columns of N1 a workgroup
//   phase 2: out = epilogue(layernorm(x_out) @ W2^T + b2)  16 columns of N2 a workgroup
// Workgroups [0, groups1) do phase 1, the others phase 2; the hand-off is chain_sync.glsl's.
// A workgroup's 16 groups of 16 invocations own a column each (a row of W), striding along
// it with 16-byte loads of 8 weights widened to f32, then a fixed tree adds the group's 16
// partials (deterministic). 16 columns a workgroup, as gemv_chain: GPT-2 124M's seams then
// take 240 workgroups, which all fit on a GPU at once (with 8 columns the last phase-2
// workgroups start only as others end). a's row is staged in shared memory by the whole
// workgroup while the first loads of W1 are in flight. Phase 2 loads the first kPre loads
// of its row of W2 (rows up to 1024: all of it) before it waits. (The H200's figures:
// docs/PERFORMANCE.md, "Measurements that shaped the kernels".) The layernorm is layernorm.comp's sums in its order. The
// host binds W1 and W2 at 16-byte boundaries, with K1 <= kAMax and K1, N1 multiples of 8.
#include "common.glsl"
#include "gelu.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A1 { float a1[]; };
layout(std430, binding = 1) readonly buffer W1 { uvec4 w1v[]; };
layout(std430, binding = 2) readonly buffer Bias1 { float bias1[]; };
layout(std430, binding = 3) readonly buffer XIn { float x_in[]; };
layout(std430, binding = 4) coherent buffer XOut { float x_out[]; };
layout(std430, binding = 5) readonly buffer W2 { uvec4 w2v[]; };
layout(std430, binding = 6) readonly buffer Bias2 { float bias2[]; };
layout(std430, binding = 7) writeonly buffer O2 { float o2[]; };
layout(std430, binding = 8) readonly buffer Gamma { float gamma[]; };
layout(std430, binding = 9) readonly buffer Beta { float beta[]; };
layout(std430, binding = 10) buffer W { uint w[]; };  // atomics only
layout(push_constant) uniform P {
  uint oa1, ob1, obias1, oxin, oxout, ob2, obias2, oo2, ogamma, obeta, ow;
  uint N1, K1, N2;
  uint flags2;  // 2: bf16, 4: bias b2, 8: gelu, 32: phase 2 never polls (tests)
  float eps;
  uint groups1, groups2;
} p;

const uint kRowMax = 2048u, kLnSlots = 8u;
const uint kLanes = 16u, kCols = 16u;  // invocations per column; columns per workgroup
const uint kSteps = 8u;  // 16-byte loads in flight per invocation in phase 1
const uint kPre = 8u;    // loads of W2 per invocation issued before the wait
const uint kFlagBf16 = 2u;
const uint kAMax = 4096u;  // the longest row of a (K1): a is staged in shared memory
shared float part[kCols][kLanes + 1u];  // [group][lane]: the partials of a group's column
shared vec4 as4[kAMax / 4u];             // a's row, staged once by the whole workgroup
#include "chain_sync.glsl"
#include "widen16.glsl"

// This dispatch's weights' dtype (flag 2: bf16, else f16).
bool bf16() { return (p.flags2 & kFlagBf16) != 0u; }

// The sum of the 16 partials of group g (every invocation calls it; barriers): a fixed tree.
float group_sum(float v, uint g, uint lx) {
  barrier();  // the previous sum's reads are done
  part[g][lx] = v;
  barrier();
  [[unroll]] for (uint s = kLanes / 2u; s > 0u; s >>= 1u) {
    if (lx < s) part[g][lx] += part[g][lx + s];
    barrier();
  }
  return part[g][0];
}

// The first kSteps loads of invocation lx's part of row n of W1 (zeros past it).
void load_w1(uint n, uint j0, out uvec4 wv[kSteps]) {
  const uint K8 = p.K1 / 8u, row = p.ob1 / 4u + n * K8;
  [[unroll]] for (uint u = 0u; u < kSteps; ++u) {
    const uint j = j0 + kLanes * u;
    wv[u] = n < p.N1 && j < K8 ? w1v[row + j] : uvec4(0u);
  }
}

// as4 = a's row (every invocation calls it; its loads go out after the caller's first loads
// of W1, so both are in flight together).
void stage_a(uint t) {
  for (uint k = t; k < p.K1; k += 256u) as4[k / 4u][k % 4u] = a1[p.oa1 + k];
  barrier();
}

// Invocation lx's partial of row n of W1 times a (as4), 8-weight groups lx, lx + 16, ...;
// wv holds the first kSteps loads (load_w1).
float phase1_partial(uint n, uint lx, uvec4 wv[kSteps]) {
  const uint K8 = p.K1 / 8u;
  vec4 acc4 = vec4(0.0);
  for (uint j0 = lx; j0 < K8; j0 += kLanes * kSteps) {
    if (j0 != lx) load_w1(n, j0, wv);
    [[unroll]] for (uint u = 0u; u < kSteps; ++u) {
      const uint j = j0 + kLanes * u;
      if (j < K8) {
        vec4 lo, hi;
        widen8(wv[u], bf16(), lo, hi);
        acc4 += as4[2u * j] * lo + as4[2u * j + 1u] * hi;
      }
    }
  }
  return (acc4.x + acc4.y) + (acc4.z + acc4.w);
}

// xs = x_out computed here (a phase-2 workgroup that gave up waiting): every column, group g
// taking g, g + 16, ..., the same sums in the same order as phase 1, one load at a time (few
// registers: the workgroup holds its first loads of W2 meanwhile, and the whole shader's
// register count sets how many workgroups fit on the GPU at once).
void x_out_into_xs(uint t, uint g, uint lx) {
  stage_a(t);
  const uint K8 = p.K1 / 8u;
  for (uint n0 = 0u; n0 < p.N1; n0 += kCols) {
    const uint n = n0 + g, row = p.ob1 / 4u + n * K8;
    vec4 acc4 = vec4(0.0);
    for (uint j = lx; j < K8; j += kLanes) {
      vec4 lo, hi;
      widen8(n < p.N1 ? w1v[row + j] : uvec4(0u), bf16(), lo, hi);
      acc4 += as4[2u * j] * lo + as4[2u * j + 1u] * hi;
    }
    const float s = group_sum((acc4.x + acc4.y) + (acc4.z + acc4.w), g, lx);
    if (lx == 0u && n < p.N1) xs[n] = (s + bias1[p.obias1 + n]) + x_in[p.oxin + n];
  }
  barrier();
}

// Invocation lx's partial of the product of row n of W2 with xs: the first kPre of its loads
// (pre, issued before the wait), then the rest.
float phase2_partial(uint n, uint lx, uvec4 pre[kPre]) {
  const uint K8 = p.N1 / 8u, row = p.ob2 / 4u + n * K8;
  vec4 acc4 = vec4(0.0);
  [[unroll]] for (uint u = 0u; u < kPre; ++u) {
    const uint j = lx + kLanes * u;
    if (j < K8) {
      vec4 lo, hi;
      widen8(pre[u], bf16(), lo, hi);
      const uint k = 8u * j;
      acc4 += vec4(xs[k], xs[k + 1u], xs[k + 2u], xs[k + 3u]) * lo +
              vec4(xs[k + 4u], xs[k + 5u], xs[k + 6u], xs[k + 7u]) * hi;
    }
  }
  for (uint j = lx + kLanes * kPre; j < K8; j += kLanes) {
    vec4 lo, hi;
    widen8(n < p.N2 ? w2v[row + j] : uvec4(0u), bf16(), lo, hi);
    const uint k = 8u * j;
    acc4 += vec4(xs[k], xs[k + 1u], xs[k + 2u], xs[k + 3u]) * lo +
            vec4(xs[k + 4u], xs[k + 5u], xs[k + 6u], xs[k + 7u]) * hi;
  }
  return (acc4.x + acc4.y) + (acc4.z + acc4.w);
}

void main() {
  const uint t = gl_LocalInvocationID.x, g = t / kLanes, lx = t % kLanes;
  const uint item = flat_group();
  bool recomputed = false;
  if (item < p.groups1) {
    const uint n = item * kCols + g;
    uvec4 wv[kSteps];
    load_w1(n, lx, wv);
    stage_a(t);
    const float s = group_sum(phase1_partial(n, lx, wv), g, lx);
    if (lx == 0u && n < p.N1) x_out[p.oxout + n] = (s + bias1[p.obias1 + n]) + x_in[p.oxin + n];
    // Every invocation's store, then invocation 0's release.
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer,
                   gl_SemanticsAcquireRelease);
    if (t == 0u)
      atomicAdd(w[p.ow + kPhase1Done], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                gl_SemanticsRelease);
  } else {
    const uint n = (item - p.groups1) * kCols + g;
    const bool mine = n < p.N2;
    // The first loads of this group's row of W2, in flight during the wait.
    const uint K8 = p.N1 / 8u, row = p.ob2 / 4u + n * K8;
    uvec4 pre[kPre];
    [[unroll]] for (uint u = 0u; u < kPre; ++u) {
      const uint j = lx + kLanes * u;
      pre[u] = mine && j < K8 ? w2v[row + j] : uvec4(0u);
    }
    const float e_bias = mine && (p.flags2 & 4u) != 0u ? bias2[p.obias2 + n] : 0.0;
    const bool ready = wait_for_phase1();
    recomputed = !ready;
    if (!ready) x_out_into_xs(t, g, lx);
    normalize_into_xs(ready, t);
    float v = group_sum(phase2_partial(n, lx, pre), g, lx);
    if ((p.flags2 & 4u) != 0u) v += e_bias;
    if ((p.flags2 & 8u) != 0u) v = gelu_tanh(v);
    if (lx == 0u && mine) o2[p.oo2 + n] = v;
  }
  finish(recomputed);
}
