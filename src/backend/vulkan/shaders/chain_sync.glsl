// The hand-off between the two phases of a one-dispatch chain (gemv_chain.glsl with f32
// weights, gemv_chain_w16.comp with 16-bit ones): matmul_add_layernorm_matmul for one row,
//   phase 1: x_out = x_in + (a @ W1 + b1)
//   phase 2: out = epilogue(layernorm(x_out) @ W2 + b2)
//
// Workgroups [0, groups1) do phase 1; each writes its columns of x_out and counts
// itself.
// Workgroups [groups1, groups1 + groups2) do phase 2: they poll the phase-1 count until
// every phase-1 group has counted itself. Vulkan promises nothing about workgroups running
// at the same time, so the poll is bounded: a workgroup that gives up computes x_out
// itself, the same sums in the same order, into shared memory (x_in is never written by
// the dispatch). No workgroup ever depends on another making progress; on a GPU that runs
// the dispatch's workgroups together the poll ends when phase 1 does. Flag 32 (tests)
// makes every phase-2 workgroup compute x_out itself.
//
// The hand-off, by the rules of the Vulkan memory model (its appendix: they bind every
// shader; x_out is coherent, which that appendix maps to an availability operation after
// each store and a visibility operation before each load, for the whole queue family, so
// for every invocation of the dispatch):
//   phase 1: a workgroup control barrier with buffer acquire-release puts every
//     invocation's x_out store before invocation 0's increment of the count, a release at
//     device scope.
//   phase 2: invocation 0 polls the count with relaxed loads; once it has read the full
//     count, an acquire fence at device scope synchronizes with every phase-1 release (the
//     increments are read-modify-writes, so the last one continues each earlier one's
//     release sequence); a workgroup control barrier with buffer acquire-release puts
//     the other invocations' x_out loads after that fence.
// (The shader does not declare the model itself, #pragma use_vulkan_memory_model: lavapipe
// then ran the variant for rows past 768 wrongly; docs/PERFORMANCE.md.)
// Every workgroup counts itself once more when done (with whether it consumed x_out or
// computed it itself in the high half); the last of all adds the dispatch's two counts to
// the report words and resets both counters to 0 for the next dispatch (no workgroup is
// still polling then). The words, from ow + kCounters - 4: the phase-1 count, the done
// count, then the report (second-phase workgroups that consumed phase 1's x_out; that
// computed it themselves), which only the host resets (VulkanBackend::take_chain_counts);
// apart from the per-row counters other kernels keep at the work buffer's start.
//
// The including shader declares, before including this file: 256 invocations a workgroup
// (1-D), the buffers x_out (coherent), gamma, beta and w (uints: the counters), push
// constants p with ow, oxout, ogamma, obeta, N1, flags2, eps, groups1 and groups2, and the
// constants kRowMax (the longest row of x_out) and kLnSlots (kRowMax / 256, rounded up).
#ifndef FORGE_CHAIN_SYNC_GLSL
#define FORGE_CHAIN_SYNC_GLSL
#include "reduce.glsl"

const uint kPolls = 16384u;  // ~ms on a GPU, below lavapipe's 65535 iterations a loop
const uint kFlagSolo = 32u;
const uint kCounters = 16384u;  // VulkanBackend's kWorkCounters
shared float xs[kRowMax];
shared uint flag;

const uint kPhase1Done = kCounters - 4u, kAllDone = kCounters - 3u;  // offsets from ow
const uint kConsumed = kCounters - 2u, kRecomputed = kCounters - 1u;
const uint kRecomputedOne = 65536u;  // a done count's high half: workgroups that recomputed

// t == 0: polls the phase-1 count until every phase-1 workgroup is in it (at most kPolls
// reads; none with flag 32); every invocation: whether it came. Relaxed atomic loads reach
// L2 (a poll by atomic add would contend with the adds it waits for, and spirv-opt deletes
// a loop of volatile loads); one acquire fence after the load that saw the full count.
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
    if (done >= p.groups1)
      memoryBarrier(gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire);
    flag = done >= p.groups1 ? 1u : 0u;
  }
  // Invocation 0's acquire, then every invocation's x_out loads; flag (shared) with them.
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup,
                 gl_StorageSemanticsBuffer | gl_StorageSemanticsShared, gl_SemanticsAcquireRelease);
  return flag != 0u;
}

// Counts this workgroup as done (recomputed: a phase-2 workgroup that computed x_out
// itself); the last of the dispatch reports the counts and resets the counters. Relaxed:
// the counts are read-modify-writes, exact in any order, and no data passes through them
// (at worst a poller could read the reset 0, keep polling and recompute x_out itself:
// still the right result, and counted as recomputed).
void finish(bool recomputed) {
  barrier();
  if (gl_LocalInvocationID.x != 0u) return;
  const uint mine = recomputed ? kRecomputedOne + 1u : 1u;
  const uint before = atomicAdd(w[p.ow + kAllDone], mine, gl_ScopeDevice,
                                gl_StorageSemanticsBuffer, gl_SemanticsRelaxed);
  if ((before & 0xFFFFu) != p.groups1 + p.groups2 - 1u) return;
  const uint redone = (before + mine) >> 16u;
  atomicAdd(w[p.ow + kConsumed], p.groups2 - redone, gl_ScopeDevice, gl_StorageSemanticsBuffer,
            gl_SemanticsRelaxed);
  atomicAdd(w[p.ow + kRecomputed], redone, gl_ScopeDevice, gl_StorageSemanticsBuffer,
            gl_SemanticsRelaxed);
  atomicStore(w[p.ow + kPhase1Done], 0u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
              gl_SemanticsRelaxed);
  atomicStore(w[p.ow + kAllDone], 0u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
              gl_SemanticsRelaxed);
}

// xs = layernorm(x_out) with x_out read from the buffer (ready) or from xs, where the
// caller computed it: layernorm.comp's sums in its order (j = t, t + 256, ...).
void normalize_into_xs(bool ready, uint t) {
  const uint K = p.N1;
  float xv[kLnSlots], gv[kLnSlots], be[kLnSlots];
  [[unroll]] for (uint u = 0u; u < kLnSlots; ++u) {
    const uint j = t + 256u * u;
    xv[u] = j < K ? (ready ? x_out[p.oxout + j] : xs[j]) : 0.0;
    gv[u] = j < K ? gamma[p.ogamma + j] : 0.0;
    be[u] = j < K ? beta[p.obeta + j] : 0.0;
  }
  float s = 0.0;
  [[unroll]] for (uint u = 0u; u < kLnSlots; ++u)
    if (t + 256u * u < K) s += xv[u];
  const float mean = wg_sum(s) / float(K);  // wg_sum's barriers order the xs reads above
  float q2 = 0.0;
  [[unroll]] for (uint u = 0u; u < kLnSlots; ++u) {
    const float d = xv[u] - mean;
    if (t + 256u * u < K) q2 += d * d;
  }
  const float rstd = 1.0 / sqrt(wg_sum(q2) / float(K) + p.eps);
  [[unroll]] for (uint u = 0u; u < kLnSlots; ++u)
    if (t + 256u * u < K) xs[t + 256u * u] = (xv[u] - mean) * rstd * gv[u] + be[u];
  barrier();
}

#endif
