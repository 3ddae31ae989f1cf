#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// argmax_rows: out[r] = the index of row r's largest element of x [rows, cols], the first of
// equals, NaN counted as -inf (a row of only -inf or NaN: 0), as the CPU's loop.
// A row is split over `groups` workgroups of 256 invocations (flat workgroup index
// r * groups + g), group g scanning the columns [g span, (g + 1) span), invocation l the
// ones l, l + 256, ... of its span, 8 loads issued at once, keeping its first maximum. The
// 256 candidates are merged pairwise (the larger value, on a tie the smaller index): the
// span's first maximum whatever the order of the merges. With groups > 1 each group writes
// its candidate to the work buffer and counts itself in the row's arrival counter; the last
// to arrive merges the groups' candidates the same way (so the result does not depend on
// which group that is), writes out[r] and resets the counter to 0 for the next dispatch.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
// [0, COUNTERS): one arrival counter per row (0 between dispatches); then the candidates
// [row][group]: value (as bits), index.
layout(std430, binding = 2) coherent buffer W { uint w[]; };
layout(push_constant) uniform P { uint ox, oo, ow, rows, cols, groups, span; } p;

const uint COUNTERS = 16384u;   // VulkanBackend's kWorkCounters
const uint NONE = 0xffffffffu;  // no element seen (an invocation past the span's end)
const uint UNROLL = 8u;
shared float sv[256];
shared uint si[256];
shared uint last;

// Merges candidate (v, i) into slot l: i takes over when it exists and beats the slot's
// value, or ties with it at a smaller index.
void merge(uint l, float v, uint i) {
  if (i != NONE && (si[l] == NONE || v > sv[l] || (v == sv[l] && i < si[l]))) {
    sv[l] = v;
    si[l] = i;
  }
}

// Leaves the merge of the 256 slots in slot 0.
void reduce(uint l) {
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1u) {
    if (l < s) merge(l, sv[l + s], si[l + s]);
    barrier();
  }
}

void main() {
  const uint wg = flat_group();
  if (wg >= p.rows * p.groups) return;  // uniform per workgroup (a folded grid's padding)
  const uint r = wg / p.groups, g = wg % p.groups;
  const uint l = gl_LocalInvocationID.x;
  const uint base = p.ox + r * p.cols;
  const uint begin = g * p.span, end = min(begin + p.span, p.cols);
  const float neg_inf = uintBitsToFloat(0xff800000u);
  float best = neg_inf;
  uint idx = NONE;
  for (uint j0 = begin + l; j0 < end; j0 += 256u * UNROLL) {
    float v[UNROLL];
    for (uint u = 0u; u < UNROLL; ++u) {
      const uint j = j0 + u * 256u;
      v[u] = j < end ? x[base + j] : neg_inf;
    }
    for (uint u = 0u; u < UNROLL; ++u) {
      const uint j = j0 + u * 256u;
      const float vu = isnan(v[u]) ? neg_inf : v[u];
      if (j < end && (idx == NONE || vu > best)) {
        best = vu;
        idx = j;
      }
    }
  }
  sv[l] = best;
  si[l] = idx;
  reduce(l);
  if (p.groups == 1u) {
    if (l == 0u) o[p.oo + r] = si[0];
    return;
  }
  const uint cand = p.ow + COUNTERS + 2u * r * p.groups;  // this row's candidates
  if (l == 0u) {
    w[cand + 2u * g] = floatBitsToUint(sv[0]);
    w[cand + 2u * g + 1u] = si[0];
  }
  memoryBarrierBuffer();
  barrier();
  if (l == 0u) last = atomicAdd(w[p.ow + r], 1u) == p.groups - 1u ? 1u : 0u;
  barrier();
  if (last == 0u) return;  // uniform: `last` is shared
  memoryBarrierBuffer();
  sv[l] = neg_inf;
  si[l] = NONE;
  for (uint k = l; k < p.groups; k += 256u)
    merge(l, uintBitsToFloat(w[cand + 2u * k]), w[cand + 2u * k + 1u]);
  reduce(l);
  if (l == 0u) {
    o[p.oo + r] = si[0];
    w[p.ow + r] = 0u;
  }
}
