// The body of the flash-attention prefill kernels (attention_prefill.comp and
// attention_prefill_big.comp: hd <= 64, attention_prefill_hd128.comp: hd <= 128). The
// including file defines the tile:
//   HD  the largest head dimension,
//   WX, WY  the workgroup's invocations: WX across keys (and dimensions), WY across queries,
//   RI  queries per invocation, KJ keys per invocation (scores), DC dimensions per
//       invocation (P V); so BR = WY * RI queries per workgroup, BC = WX * KJ keys per step
//       (a power of 2 <= 32), HD = WX * DC, BR a multiple of 32;
//   VW  1, or 4: an invocation's keys and dimensions come in runs of VW consecutive ones
//       (then RI, KJ and DC are multiples of VW): the runs of 4 are 16-byte aligned in
//       shared memory, so a GPU may read each with one vector load.
// Shared memory: Q HD * BR floats, K/P max(HD * BC, BC * BR), V BC * HD.
//
// One workgroup per (b*H + h, tile of BR queries); flat index f: tile
// tiles - 1 - f / G, head g = f % G (the longest tiles first, so the causal triangle's tail
// is short). Per key block:
//   1. the K tile (transposed: [d][key]) and the V tile ([key][d]) go to shared memory;
//      keys s < pos come from the caches, the new ones (s >= pos) from qkv;
//   2. invocation (tx, ty) scores queries ty*RI + i (i < RI) against its KJ keys kcol(c)
//      from the shared Q and K tiles, into registers;
//   3. row max over the WX invocations of a row through shared memory; online softmax: the
//      running max m, this invocation's share of the running sum, the output accumulator
//      rescaled by exp(m_old - m_new);
//   4. the probabilities go to shared memory (P [key][query]) and every invocation adds
//      P V for its queries and its DC dimensions kcol(c).
// The scores never leave the workgroup. The row sums are added over the WX invocations in a
// fixed order at the end: deterministic. The workgroup also writes its queries' keys and
// values to rows pos + t of the caches; no workgroup reads cache rows >= pos.
// Bank conflicts: K is stored at [d][key ^ (d % BC)] and P at [key][query ^ (key % 32)],
// the XOR's low log2(VW) bits cleared so that runs of VW stay whole: consecutive
// invocations then hit distinct banks (or distinct runs) both when storing and when reading.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

const uint BR = WY * RI, BC = WX * KJ, NT = WX * WY;
const uint LOADS = (BC * HD + NT - 1u) / NT;  // K (and V) tile elements per invocation
layout(local_size_x = WX, local_size_y = WY) in;
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) buffer KC { float kc[]; };
layout(std430, binding = 2) buffer VC { float vc[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint oqkv, okc, ovc, oo;
  uint T, H, hd, cap, pos, cached;
  float scale;  // 1 / sqrt(hd)
  uint tiles;   // query tiles per head: ceil(T / BR)
  uint G;       // B * H
} p;

const float NEG = -3.402823466e38;  // "no score yet": exp(NEG - x) is 0 for any score x
const uint KP_SIZE = HD * BC > BC * BR ? HD * BC : BC * BR;  // >= BR * (WX + 1) too
const uint KSW = BC - VW, PSW = 32u - VW;                   // the XOR swizzles' masks
shared float Qs[HD * BR];  // [d][query], scaled
shared float KP[KP_SIZE];  // the K tile [d][key]; then row maxima [query][WX + 1]; then P
shared float Vs[BC * HD];  // [key][d]

// Column c (< KJ or < DC) of invocation tx: runs of VW, the runs WX * VW apart.
uint kcol(uint tx, uint c) { return (c / VW) * (WX * VW) + tx * VW + c % VW; }
// Slot of (key j, query ty*RI + i) in P: the run's start swizzled, then the offset in it.
uint pslot(uint j, uint ty, uint i) {
  return j * BR + ((ty * RI + (i / VW) * VW) ^ (j & PSW)) + i % VW;
}

// This invocation's elements e = tid + it NT (key e / hd, dimension e % hd) of the K and V
// tiles of keys [j0, j0 + BC): every load issued before any is used (one wait on memory per
// block); keys past `last` and elements past BC * hd are zeros.
void load_block(uint j0, uint last, uint hd, uint C3, uint qbase, uint crow, bool cached,
                out float kr[LOADS], out float vr[LOADS]) {
  const uint tid = gl_LocalInvocationID.y * WX + gl_LocalInvocationID.x;
  const uint C = C3 / 3u;
  [[unroll]] for (uint it = 0u; it < LOADS; ++it) {
    const uint e = tid + it * NT;
    const uint j = e / hd, d = e % hd, key = j0 + j;
    kr[it] = 0.0;
    vr[it] = 0.0;
    if (e < BC * hd && key < last) {
      if (cached && key < p.pos) {
        kr[it] = kc[p.okc + crow + key * hd + d];
        vr[it] = vc[p.ovc + crow + key * hd + d];
      } else {
        const uint row = qbase + (key - p.pos) * C3 + d;
        kr[it] = qkv[row + C];
        vr[it] = qkv[row + 2u * C];
      }
    }
  }
}

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint tid = ty * WX + tx;
  const uint f = flat_group();
  if (f >= p.tiles * p.G) return;  // uniform per workgroup (a folded grid's padding)
  const uint tile = p.tiles - 1u - f / p.G, bh = f % p.G;
  const uint b = bh / p.H, h = bh % p.H;
  const uint hd = p.hd, C = p.H * hd, C3 = 3u * C;
  const uint t0 = tile * BR;
  const uint S = p.pos + p.T;                   // keys in all
  const uint last = min(p.pos + t0 + BR, S);    // keys this tile sees: [0, last)
  const uint qbase = p.oqkv + b * p.T * C3 + h * hd;  // q of new position 0; k at +C, v +2C
  const uint crow = bh * p.cap * hd;                  // row 0 of this head's caches
  const bool cached = p.cached != 0u;

  // The Q tile (rows past T are zeros) and this tile's new keys/values into the caches.
  for (uint e = tid; e < BR * hd; e += NT) {
    const uint r = e / hd, d = e % hd, t = t0 + r;
    float q = 0.0;
    if (t < p.T) {
      const uint row = qbase + t * C3 + d;
      q = qkv[row] * p.scale;
      if (cached) {
        kc[p.okc + crow + (p.pos + t) * hd + d] = qkv[row + C];
        vc[p.ovc + crow + (p.pos + t) * hd + d] = qkv[row + 2u * C];
      }
    }
    Qs[d * BR + r] = q;
  }

  float m[RI], lsum[RI], acc[RI][DC];
  [[unroll]] for (uint i = 0u; i < RI; ++i) {
    m[i] = NEG;
    lsum[i] = 0.0;
    [[unroll]] for (uint c = 0u; c < DC; ++c) acc[i][c] = 0.0;
  }

  // Block j0's K and V elements of this invocation, loaded one block ahead: the next
  // block's loads are in flight while this one is computed.
  float kr[LOADS], vr[LOADS];
  load_block(0u, last, hd, C3, qbase, crow, cached, kr, vr);
  for (uint j0 = 0u; j0 < last; j0 += BC) {
    barrier();  // the previous block's P and V are consumed (and Qs is complete)
    // 1. The K and V tiles to shared memory, from registers loaded one block ahead.
    [[unroll]] for (uint it = 0u; it < LOADS; ++it) {
      const uint e = tid + it * NT;
      if (e < BC * hd) {
        const uint j = e / hd, d = e % hd;
        KP[d * BC + (j ^ (d & KSW))] = kr[it];
        Vs[j * HD + d] = vr[it];
      }
    }
    barrier();
    if (j0 + BC < last) load_block(j0 + BC, last, hd, C3, qbase, crow, cached, kr, vr);

    // 2. Scores of queries ty*RI + i against keys kcol(tx, c).
    float s[RI][KJ];
    [[unroll]] for (uint i = 0u; i < RI; ++i)
      [[unroll]] for (uint c = 0u; c < KJ; ++c) s[i][c] = 0.0;
    for (uint d = 0u; d < hd; ++d) {
      const uint sw = d & KSW;
      float qv[RI], kv[KJ];
      [[unroll]] for (uint i = 0u; i < RI; ++i) qv[i] = Qs[d * BR + ty * RI + i];
      [[unroll]] for (uint c = 0u; c < KJ; ++c)
        kv[c] = KP[d * BC + ((kcol(tx, c) - c % VW) ^ sw) + c % VW];
      [[unroll]] for (uint i = 0u; i < RI; ++i)
        [[unroll]] for (uint c = 0u; c < KJ; ++c) s[i][c] += qv[i] * kv[c];
    }
    // Causal mask: query t0 + r sees keys <= pos + t0 + r (and < last).
    float pmax[RI];
    [[unroll]] for (uint i = 0u; i < RI; ++i) {
      const uint lim = min(p.pos + t0 + ty * RI + i + 1u, last);
      pmax[i] = NEG;
      [[unroll]] for (uint c = 0u; c < KJ; ++c) {
        if (j0 + kcol(tx, c) >= lim) s[i][c] = NEG;
        pmax[i] = max(pmax[i], s[i][c]);
      }
    }
    barrier();  // K is consumed: KP now holds the row maxima
    [[unroll]] for (uint i = 0u; i < RI; ++i) KP[(ty * RI + i) * (WX + 1u) + tx] = pmax[i];
    barrier();

    // 3. Online softmax.
    float pr[RI][KJ];
    [[unroll]] for (uint i = 0u; i < RI; ++i) {
      float mx = m[i];
      for (uint x = 0u; x < WX; ++x) mx = max(mx, KP[(ty * RI + i) * (WX + 1u) + x]);
      const float corr = exp(m[i] - mx);
      m[i] = mx;
      float sum = 0.0;
      [[unroll]] for (uint c = 0u; c < KJ; ++c) {
        pr[i][c] = s[i][c] == NEG ? 0.0 : exp(s[i][c] - mx);
        sum += pr[i][c];
      }
      lsum[i] = lsum[i] * corr + sum;
      [[unroll]] for (uint c = 0u; c < DC; ++c) acc[i][c] *= corr;
    }
    barrier();  // the maxima are read: KP now holds P
    [[unroll]] for (uint i = 0u; i < RI; ++i)
      [[unroll]] for (uint c = 0u; c < KJ; ++c) KP[pslot(kcol(tx, c), ty, i)] = pr[i][c];
    barrier();

    // 4. acc += P V over the block's keys.
    const uint nb = min(BC, last - j0);
    for (uint j = 0u; j < nb; ++j) {
      float pv[RI];
      [[unroll]] for (uint i = 0u; i < RI; ++i) pv[i] = KP[pslot(j, ty, i)];
      [[unroll]] for (uint c = 0u; c < DC; ++c) {
        const float v = Vs[j * HD + kcol(tx, c)];
        [[unroll]] for (uint i = 0u; i < RI; ++i) acc[i][c] += pv[i] * v;
      }
    }
  }

  // Row sums over the WX invocations of each row, in order; then the merged-heads output.
  barrier();
  [[unroll]] for (uint i = 0u; i < RI; ++i) KP[(ty * RI + i) * (WX + 1u) + tx] = lsum[i];
  barrier();
  [[unroll]] for (uint i = 0u; i < RI; ++i) {
    const uint t = t0 + ty * RI + i;
    if (t >= p.T) continue;
    float total = 0.0;
    for (uint x = 0u; x < WX; ++x) total += KP[(ty * RI + i) * (WX + 1u) + x];
    const float inv = 1.0 / total;
    [[unroll]] for (uint c = 0u; c < DC; ++c) {
      const uint d = kcol(tx, c);
      if (d < hd) o[p.oo + (b * p.T + t) * C + h * hd + d] = acc[i][c] * inv;
    }
  }
}
