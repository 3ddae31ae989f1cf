#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

#include "reduce.glsl"
// Fused causal attention for a few new queries (decode; VulkanBackend::attention picks it
// for small T): one 256-wide workgroup per query (b, h, t), flat index (b*H + h)*T + t.
//   qkv [B, T, 3C] (q | k | v, heads contiguous in each), caches [B*H, cap, hd],
//   out [B, T, C]; query t sees keys s <= pos + t: s < pos from the caches, the new ones
//   (s >= pos) straight from qkv. The workgroup of query t also writes key/value pos + t
//   to the caches; no workgroup reads cache rows >= pos, so that write races with nothing.
// Keys go in chunks of 256 (S may exceed any shared array). Scores: invocation l takes
// dimensions lane = l % 16, +16, ... of keys l / 16 + 16 i (i < 16), so that 16 neighbouring
// invocations read one key row together and each has 16 independent loads in flight per
// step; the 16 partial dots of a key are then added in shared memory by the key's own
// invocation. Then a workgroup max and an online softmax (running max m; each invocation
// keeps its key's share of the running sum and its share of the output, rescaled by
// exp(m_old - m_new) whenever m grows). For p v, invocation l takes dimension l % lanes of
// the keys j = l / lanes (mod 256 / lanes) of the chunk. Partial outputs and sums are added
// in a fixed order at the end, so results do not depend on timing. hd <= 128.
// Without caches (cached = 0, pos = 0) bindings 1 and 2 are qkv again and never touched.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) buffer KC { float kc[]; };
layout(std430, binding = 2) buffer VC { float vc[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint oqkv, okc, ovc, oo;
  uint T, H, hd, cap, pos, cached;
  float scale;  // 1 / sqrt(hd)
  uint tiles;   // unused here (attention_prefill's push constants, shared)
  uint G;       // B * H
} p;

const uint CHUNK = 256u;
const float NEG = -3.402823466e38;  // "no score yet": exp(NEG - x) is 0 for any score x
shared float qs[128];               // the scaled query
shared float ps[CHUNK];             // exp(score - m) of the chunk's keys
shared float part[CHUNK * 17u];     // [key][lane] partial dots; the groups' outputs at the end

void main() {
  const uint g = flat_group();
  if (g >= p.G * p.T) return;  // uniform per workgroup (a folded grid's padding)
  const uint l = gl_LocalInvocationID.x;
  const uint t = g % p.T, bh = g / p.T;
  const uint b = bh / p.H, h = bh % p.H;
  const uint C = p.H * p.hd, C3 = 3u * C;
  const uint qrow = p.oqkv + (b * p.T + t) * C3 + h * p.hd;  // q of this query
  const uint knew = p.oqkv + b * p.T * C3 + C + h * p.hd;   // k of new position pos
  const uint crow = bh * p.cap * p.hd;                       // row 0 of this head's caches
  const bool cached = p.cached != 0u;
  if (l < p.hd) {
    qs[l] = qkv[qrow + l] * p.scale;
    if (cached) {
      kc[p.okc + crow + (p.pos + t) * p.hd + l] = qkv[qrow + C + l];
      vc[p.ovc + crow + (p.pos + t) * p.hd + l] = qkv[qrow + 2u * C + l];
    }
  }
  barrier();

  const uint S = p.pos + t + 1u;  // keys this query sees
  const uint lanes = p.hd <= 32u ? 32u : (p.hd <= 64u ? 64u : 128u);
  const uint groups = 256u / lanes;
  const uint d = l % lanes, grp = l / lanes;
  float m = NEG;      // running max, the same in every invocation
  float lsum = 0.0;   // this invocation's keys' share of the running sum
  float acc = 0.0;    // output dimension d over this group's keys
  const uint kk = l / 16u, lane = l % 16u;
  for (uint j0 = 0u; j0 < S; j0 += CHUNK) {
    const uint n = min(CHUNK, S - j0);
    float dots[16];
    [[unroll]] for (uint i = 0u; i < 16u; ++i) dots[i] = 0.0;
    for (uint e = lane; e < p.hd; e += 16u) {
      const float qe = qs[e];
      [[unroll]] for (uint i = 0u; i < 16u; ++i) {
        const uint key = j0 + kk + 16u * i;
        if (key < j0 + n)
          dots[i] += qe * (cached && key < p.pos ? kc[p.okc + crow + key * p.hd + e]
                                                 : qkv[knew + (key - p.pos) * C3 + e]);
      }
    }
    // (The previous chunk's reads of part ended before the barriers of its wg_max.)
    [[unroll]] for (uint i = 0u; i < 16u; ++i) part[(kk + 16u * i) * 17u + lane] = dots[i];
    barrier();
    float s = NEG;
    if (l < n) {
      s = 0.0;
      for (uint x = 0u; x < 16u; ++x) s += part[l * 17u + x];
    }
    const float m_new = max(m, wg_max(s));
    const float corr = exp(m - m_new);
    const float e = l < n ? exp(s - m_new) : 0.0;
    lsum = lsum * corr + e;
    m = m_new;
    ps[l] = e;
    barrier();
    acc *= corr;
    if (d < p.hd) {
      // Four keys per step: four independent loads in flight, added in key order.
      uint j = grp;
      for (; j + 3u * groups < n; j += 4u * groups) {
        float v[4];
        [[unroll]] for (uint u = 0u; u < 4u; ++u) {
          const uint key = j0 + j + u * groups;
          v[u] = cached && key < p.pos ? vc[p.ovc + crow + key * p.hd + d]
                                       : qkv[knew + (key - p.pos) * C3 + C + d];
        }
        [[unroll]] for (uint u = 0u; u < 4u; ++u) acc += ps[j + u * groups] * v[u];
      }
      for (; j < n; j += groups) {
        const uint key = j0 + j;
        acc += ps[j] * (cached && key < p.pos ? vc[p.ovc + crow + key * p.hd + d]
                                              : qkv[knew + (key - p.pos) * C3 + C + d]);
      }
    }
    barrier();  // ps is rewritten by the next chunk
  }
  const float total = wg_sum(lsum);  // its barriers also end every read of part
  part[l] = acc;
  barrier();
  if (grp == 0u && d < p.hd) {
    float y = 0.0;
    for (uint i = 0u; i < groups; ++i) y += part[i * lanes + d];
    o[p.oo + (b * p.T + t) * C + h * p.hd + d] = y / total;
  }
}
