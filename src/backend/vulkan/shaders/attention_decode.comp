#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#include "reduce.glsl"
// Fused causal attention for a few new queries (decode; VulkanBackend::attention picks it
// for small T): one 256-wide workgroup per query (b, h, t), flat index (b*H + h)*T + t.
//   qkv [B, T, 3C] (q | k | v, heads contiguous in each), caches [B*H, cap, hd],
//   out [B, T, C]; query t sees keys s <= pos + t: s < pos from the caches, the new ones
//   (s >= pos) straight from qkv. The workgroup of query t also writes key/value pos + t
//   to the caches; no workgroup reads cache rows >= pos, so that write races with nothing.
// Keys go in chunks of 256, one per invocation (S may exceed any shared array): the score
// q . k_s, a workgroup max, then an online softmax (running max m; each invocation keeps
// its share of the running sum and of the output, rescaled by exp(m_old - m_new) whenever
// m grows). For p v, invocation l takes dimension l % lanes of the keys j = l / lanes
// (mod 256 / lanes) of the chunk; the partial outputs and sums are added in a fixed order
// at the end, so results do not depend on timing. hd <= 128.
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
shared float part[256];             // the partial outputs of the groups, at the end

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
  for (uint j0 = 0u; j0 < S; j0 += CHUNK) {
    const uint n = min(CHUNK, S - j0);
    float s = NEG;
    if (l < n) {
      const uint key = j0 + l;
      float dot = 0.0;
      if (cached && key < p.pos) {
        const uint kb = p.okc + crow + key * p.hd;
        for (uint e = 0u; e < p.hd; ++e) dot += qs[e] * kc[kb + e];
      } else {
        const uint kb = knew + (key - p.pos) * C3;
        for (uint e = 0u; e < p.hd; ++e) dot += qs[e] * qkv[kb + e];
      }
      s = dot;
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
      for (uint j = grp; j < n; j += groups) {
        const uint key = j0 + j;
        const float v = cached && key < p.pos ? vc[p.ovc + crow + key * p.hd + d]
                                              : qkv[knew + (key - p.pos) * C3 + C + d];
        acc += ps[j] * v;
      }
    }
    barrier();  // ps is rewritten by the next chunk
  }
  const float total = wg_sum(lsum);
  part[l] = acc;
  barrier();
  if (grp == 0u && d < p.hd) {
    float y = 0.0;
    for (uint i = 0u; i < groups; ++i) y += part[i * lanes + d];
    o[p.oo + (b * p.T + t) * C + h * p.hd + d] = y / total;
  }
}
