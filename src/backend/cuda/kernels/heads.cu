// Attention head layouts: pure copies between the fused qkv / merged layouts and per-head
// tensors, plus the KV-cache store of the new keys and values.
// C = nh * hd. qkv: [B, T, 3C] laid out q | k | v, heads contiguous inside each part.
// Every kernel is a grid-stride loop (block 256) over its OUTPUT elements, so the writes are
// coalesced; each index is decomposed with the innermost dimension first.

// qkv: [B, T, 3C] -> out: [B*nh, T, hd]; out[b*nh + h, t, d] = qkv[b, t, part*C + h*hd + d].
extern "C" __global__ void forge_split_heads(const float* qkv, float* out, i64 B, i64 T, i64 nh,
                                             i64 hd, int part) {
  const i64 C = nh * hd;
  const i64 n = B * nh * T * hd;
  FORGE_GRID_STRIDE(i, n) {
    const i64 d = i % hd;
    const i64 t = (i / hd) % T;
    const i64 bh = i / (hd * T);
    const i64 b = bh / nh, h = bh % nh;
    out[i] = qkv[(b * T + t) * 3 * C + part * C + h * hd + d];
  }
}

// x: [B*nh, T, hd] -> out: [B, T, C]; out[b, t, h*hd + d] = x[b*nh + h, t, d].
extern "C" __global__ void forge_merge_heads(const float* x, float* out, i64 B, i64 T, i64 nh,
                                             i64 hd) {
  const i64 C = nh * hd;
  const i64 n = B * T * C;
  FORGE_GRID_STRIDE(i, n) {
    const i64 bt = i / C, hdi = i % C;
    const i64 b = bt / T, t = bt % T;
    const i64 h = hdi / hd, d = hdi % hd;
    out[i] = x[((b * nh + h) * T + t) * hd + d];
  }
}

// dq, dk, dv: [B*nh, T, hd] -> out: [B, T, 3C]; the inverse of split_heads for all three
// parts: out[b, t, part*C + h*hd + d] = d{q,k,v}[b*nh + h, t, d].
extern "C" __global__ void forge_unsplit_head(const float* dq, const float* dk, const float* dv,
                                              float* out, i64 B, i64 T, i64 nh, i64 hd) {
  const i64 C = nh * hd;
  const i64 n = B * T * 3 * C;
  FORGE_GRID_STRIDE(i, n) {
    const i64 bt = i / (3 * C), rem = i % (3 * C);
    const i64 part = rem / C, hdi = rem % C;
    const i64 b = bt / T, t = bt % T;
    const i64 h = hdi / hd, d = hdi % hd;
    const float* src = part == 0 ? dq : (part == 1 ? dk : dv);
    out[i] = src[((b * nh + h) * T + t) * hd + d];
  }
}

// x: [B, T, C] -> out: [B*nh, T, hd]; out[b*nh + h, t, d] = x[b, t, h*hd + d].
extern "C" __global__ void forge_unmerge_heads(const float* x, float* out, i64 B, i64 T, i64 nh,
                                               i64 hd) {
  const i64 C = nh * hd;
  const i64 n = B * nh * T * hd;
  FORGE_GRID_STRIDE(i, n) {
    const i64 d = i % hd;
    const i64 t = (i / hd) % T;
    const i64 bh = i / (hd * T);
    const i64 b = bh / nh, h = bh % nh;
    out[i] = x[(b * T + t) * C + h * hd + d];
  }
}

// qkv: [B, T, 3C]; k_cache, v_cache: [B*nh, cap, hd]. Writes the T new keys and values
// (parts 1 and 2 of qkv) to rows pos..pos+T-1 of head b*nh + h:
//   k_cache[b*nh + h, pos + t, d] = qkv[b, t, C + h*hd + d]   (v: 2C + ...)
// With pos_ptr (a captured decode step), the position is read on the device and clamped to
// cap - T, so that nothing outside the caches is written; the host range-checks it.
extern "C" __global__ void forge_kv_store(const float* qkv, float* k_cache, float* v_cache, i64 B,
                                          i64 T, i64 nh, i64 hd, i64 cap, i64 pos,
                                          const u32* pos_ptr) {
  if (pos_ptr != nullptr) {
    pos = (i64)pos_ptr[0];
    if (pos > cap - T) pos = cap - T;
  }
  const i64 C = nh * hd;
  const i64 n = B * nh * T * hd;
  FORGE_GRID_STRIDE(i, n) {
    const i64 d = i % hd;
    const i64 t = (i / hd) % T;
    const i64 bh = i / (hd * T);
    const i64 b = bh / nh, h = bh % nh;
    const float* src = qkv + (b * T + t) * 3 * C + h * hd + d;
    const i64 dst = (bh * cap + pos + t) * hd + d;
    k_cache[dst] = src[C];
    v_cache[dst] = src[2 * C];
  }
}
