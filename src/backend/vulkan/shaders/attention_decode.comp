#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// Fused causal attention for a few new queries (decode; VulkanBackend::attention picks it
// for small T). A query's keys are split over `splits` workgroups of 128 invocations, so a
// batch-1 step fills a GPU (one workgroup per head would leave most of it idle):
//   flat workgroup index (query * splits + split), query = (b*H + h)*T + t;
//   qkv [B, T, 3C] (q | k | v, heads contiguous in each), caches [B*H, cap, hd],
//   out [B, T, C]. Query t sees keys s <= pos + t: s < pos from the caches, the new ones
//   (s >= pos) straight from qkv. Split 0 of query t also writes key/value pos + t to the
//   caches; no workgroup reads cache rows >= pos, so that write races with nothing.
// With flags & 2 the position is read from posbuf[opos] (attention_at: a recorded decode
// step replayed at every position), clamped to cap - T so that nothing outside the caches
// is ever touched.
//
// Keys go in chunks of KEYS: split i takes chunks i, i + splits, ... All of a chunk's key and
// value loads are issued before any is used (one wait on memory per chunk, not one per
// unrolled step). Scores: 16 neighbouring invocations read one key row together (dimensions
// lane, lane + 16, ...), 4 keys each; the 16 partial dots of a key are added in shared
// memory. An online softmax across the
// chunks (running max m, sum and output rescaled by exp(m_old - m_new)). For p v,
// invocation l takes dimension l % lanes of the chunk's keys l / lanes (mod 128 / lanes).
// Every sum runs in a fixed order.
//
// Then each split writes (m, sum, output[hd]) to the work buffer and counts itself in the
// query's arrival counter; the last to arrive combines the splits' partials in split order
// (the result does not depend on which one that is) and resets the counter to 0 for the
// next dispatch. With splits = 1 the workgroup writes out directly.
// Without caches (flags & 1 = 0, pos = 0) bindings 1 and 2 are qkv again and never touched.
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) buffer KC { float kc[]; };
layout(std430, binding = 2) buffer VC { float vc[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
// [0, COUNTERS): one arrival counter per query (0 between dispatches); then the partials
// [query][split][2 + hd]: m, sum, output (floats as bits).
layout(std430, binding = 4) coherent buffer W { uint w[]; };
layout(std430, binding = 5) readonly buffer Pos { uint posbuf[]; };
layout(push_constant) uniform P {
  uint oqkv, okc, ovc, oo, ow, opos;
  uint T, H, hd, cap, pos;
  uint flags;  // 1: caches, 2: position from posbuf[opos]
  float scale;  // 1 / sqrt(hd)
  uint splits;  // workgroups per query
  uint G;       // B * H
} p;

const uint WG = 128u;
const uint KEYS = 32u;
const uint COUNTERS = 16384u;  // VulkanBackend's kWorkCounters
const float NEG = -3.402823466e38;  // "no score yet": exp(NEG - x) is 0 for any score x
shared float qs[128];               // the scaled query
shared float ps[KEYS];              // the chunk's scores, then exp(score - m)
shared float part[KEYS * 17u];      // [key][lane] partial dots; the groups' outputs at the end
shared uint last;                   // this workgroup arrived last

void main() {
  const uint g = flat_group();
  if (g >= p.G * p.T * p.splits) return;  // uniform per workgroup (a folded grid's padding)
  const uint l = gl_LocalInvocationID.x;
  const uint split = g % p.splits, query = g / p.splits;
  const uint t = query % p.T, bh = query / p.T;
  const uint b = bh / p.H, h = bh % p.H;
  const bool cached = (p.flags & 1u) != 0u;
  const uint pos = (p.flags & 2u) != 0u ? min(posbuf[p.opos], p.cap - p.T) : p.pos;
  const uint C = p.H * p.hd, C3 = 3u * C;
  const uint qrow = p.oqkv + (b * p.T + t) * C3 + h * p.hd;  // q of this query
  const uint knew = p.oqkv + b * p.T * C3 + C + h * p.hd;   // k of new position pos
  const uint crow = bh * p.cap * p.hd;                       // row 0 of this head's caches
  qs[l] = l < p.hd ? qkv[qrow + l] * p.scale : 0.0;  // zeros past hd: they meet zeros
  if (l < p.hd) {
    if (cached && split == 0u) {
      kc[p.okc + crow + (pos + t) * p.hd + l] = qkv[qrow + C + l];
      vc[p.ovc + crow + (pos + t) * p.hd + l] = qkv[qrow + 2u * C + l];
    }
  }
  barrier();

  const uint S = pos + t + 1u;  // keys this query sees
  const uint lanes = p.hd <= 32u ? 32u : (p.hd <= 64u ? 64u : 128u);
  const uint groups = WG / lanes;
  const uint d = l % lanes, grp = l / lanes;
  const uint kk = l / 16u, lane = l % 16u;
  float m = NEG;     // running max (the same in every invocation)
  float sum = 0.0;   // running sum of exp(score - m) (the same in every invocation)
  float acc = 0.0;   // output dimension d over this group's keys
  for (uint j0 = split * KEYS; j0 < S; j0 += p.splits * KEYS) {
    const uint n = min(KEYS, S - j0);
    // Every load of the chunk first, keys and values (the values do not depend on the
    // scores), so that they are all in flight together: the chunk waits on memory once.
    float kv[4][8];  // key kk + 8 i, dimensions lane + 16 e
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      const uint key = j0 + kk + 8u * i;
      [[unroll]] for (uint e = 0u; e < 8u; ++e) {
        const uint dim = lane + 16u * e;
        kv[i][e] = key < j0 + n && dim < p.hd
                       ? (cached && key < pos ? kc[p.okc + crow + key * p.hd + dim]
                                              : qkv[knew + (key - pos) * C3 + dim])
                       : 0.0;
      }
    }
    float vv[32];  // dimension d of keys grp + groups u
    [[unroll]] for (uint u = 0u; u < 32u; ++u) {
      const uint key = j0 + grp + u * groups;
      vv[u] = d < p.hd && key < j0 + n
                  ? (cached && key < pos ? vc[p.ovc + crow + key * p.hd + d]
                                         : qkv[knew + (key - pos) * C3 + C + d])
                  : 0.0;
    }
    float dots[4];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      dots[i] = 0.0;
      [[unroll]] for (uint e = 0u; e < 8u; ++e) dots[i] += qs[lane + 16u * e] * kv[i][e];
    }
    // (The previous chunk's reads of part ended before its last barrier.)
    [[unroll]] for (uint i = 0u; i < 4u; ++i) part[(kk + 8u * i) * 17u + lane] = dots[i];
    barrier();
    if (l < KEYS) {
      float s = NEG;
      if (l < n) {
        s = 0.0;
        for (uint x = 0u; x < 16u; ++x) s += part[l * 17u + x];
      }
      ps[l] = s;
    }
    barrier();
    float cmax = NEG;
    for (uint j = 0u; j < n; ++j) cmax = max(cmax, ps[j]);
    const float m_new = max(m, cmax);
    const float corr = exp(m - m_new);
    barrier();  // every invocation has read the scores
    if (l < KEYS) ps[l] = l < n ? exp(ps[l] - m_new) : 0.0;
    barrier();
    float csum = 0.0;
    for (uint j = 0u; j < n; ++j) csum += ps[j];
    sum = sum * corr + csum;
    m = m_new;
    acc *= corr;
    // p v in key order; keys past n have p = 0 and v = 0.
    [[unroll]] for (uint u = 0u; u < 32u; ++u) {
      const uint j = grp + u * groups;
      if (j < KEYS) acc += ps[j] * vv[u];
    }
    barrier();  // ps and part are rewritten by the next chunk
  }
  part[l] = acc;
  barrier();
  float y = 0.0;
  if (grp == 0u && d < p.hd)
    for (uint i = 0u; i < groups; ++i) y += part[i * lanes + d];
  const uint orow = p.oo + (b * p.T + t) * C + h * p.hd;
  if (p.splits == 1u) {
    if (grp == 0u && d < p.hd) o[orow + d] = y / sum;
    return;
  }

  // This split's partial, then its arrival; the last split combines all of them.
  const uint stride = p.hd + 2u;
  const uint base0 = p.ow + COUNTERS + query * p.splits * stride;
  const uint base = base0 + split * stride;
  if (l == 0u) {
    w[base] = floatBitsToUint(m);
    w[base + 1u] = floatBitsToUint(sum);
  }
  if (grp == 0u && d < p.hd) w[base + 2u + d] = floatBitsToUint(y);
  memoryBarrierBuffer();
  barrier();
  if (l == 0u) last = atomicAdd(w[p.ow + query], 1u) == p.splits - 1u ? 1u : 0u;
  barrier();
  if (last == 0u) return;  // uniform: `last` is shared
  memoryBarrierBuffer();
  if (l < p.hd) {
    float mx = NEG;
    for (uint s = 0u; s < p.splits; ++s) mx = max(mx, uintBitsToFloat(w[base0 + s * stride]));
    float total = 0.0, out_d = 0.0;
    for (uint s = 0u; s < p.splits; ++s) {
      const uint bs = base0 + s * stride;
      const float c = exp(uintBitsToFloat(w[bs]) - mx);  // 0 for a split without keys
      total += uintBitsToFloat(w[bs + 1u]) * c;
      out_d += uintBitsToFloat(w[bs + 2u + l]) * c;
    }
    o[orow + l] = out_d / total;
  }
  if (l == 0u) w[p.ow + query] = 0u;
}
