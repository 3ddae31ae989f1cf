// forge_attention_tiled (attention_tiled.cu) for head dimension 64, GPT-2's at every size:
// the same function, arguments, grid and online softmax, with the inner products reading
// shared memory as float4s. Thread (ty, tx) owns query rows ty + 16 i and, for the scores,
// key columns tx + 16 j (i, j < 4), as there; for the output it owns the 4 adjacent
// dimensions 4 tx .. 4 tx + 3. Per 4 steps of a dot product it reads 4 query and 4 key float4s
// for 64 FMAs (attention_tiled.cu: 32 scalar reads), and per 4 keys of P V 4 float4s of P and
// 4 of V for 64 FMAs, so the FMAs, not shared memory, bound the loops.
//
// Dynamic shared memory: Q, K and P tiles [64][68] (a row stride of 68 floats puts the 8 rows
// a quarter-warp reads at one column in 8 different 16-byte bank groups) and V [64][64]:
// 68,608 bytes (the host raises the 48 KiB default). qkv and the caches 16-byte aligned with
// rows a multiple of 4 floats (the host checks).

extern "C" __global__ void __launch_bounds__(256, 2)
    forge_attention_tiled64(const float* qkv, const float* k_cache, const float* v_cache,
                            float* out, i64 B, i64 T, i64 nh, i64 hd, i64 cap, i64 pos,
                            const u32* pos_ptr, float scale) {
  extern __shared__ float4 forge_fa64_smem4[];
  if (hd != 64 || blockDim.x != 256) return;  // refused by the host
  const i64 tile = (i64)gridDim.x - 1 - blockIdx.x, bh = blockIdx.y;
  if (bh >= B * nh) return;
  const i64 b = bh / nh, h = bh % nh;
  const i64 C = nh * 64;
  float* q_s = reinterpret_cast<float*>(forge_fa64_smem4);  // [64][68]
  float* k_s = q_s + FORGE_FA_ROWS * FORGE_FA64_LD;         // [64][68]
  float* p_s = k_s + FORGE_FA_ROWS * FORGE_FA64_LD;         // [64][68]
  float* v_s = p_s + FORGE_FA_ROWS * FORGE_FA64_LD;         // [64][64]

  const ForgeAttnKv kv = forge_attn_kv(qkv, k_cache, v_cache, bh, T, nh, 64, cap, pos, pos_ptr);
  pos = kv.pos;
  const i64 t0 = tile * FORGE_FA_ROWS;
  const i64 t_last = (t0 + FORGE_FA_ROWS < T ? t0 + FORGE_FA_ROWS : T) - 1;
  const i64 n_keys = pos + t_last + 1;  // keys the tile's last query sees

  const float* q_base = qkv + b * T * 3 * C + h * 64;
  forge_fa_load_tile(q_s, FORGE_FA64_LD, q_base, 3 * C, t0, T, 64, scale, true);

  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  float m[4], l[4], o[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = forge_neg_inf();
    l[i] = 0.0f;
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  }

  for (i64 s0 = 0; s0 < n_keys; s0 += FORGE_FA_ROWS) {
    __syncthreads();  // the previous tile's readers are done (and q_s is written)
    forge_fa_load_tile(k_s, FORGE_FA64_LD, kv.k, kv.stride, s0, n_keys, 64, 1.0f, true);
    forge_fa_load_tile(v_s, 64, kv.v, kv.stride, s0, n_keys, 64, 1.0f, true);
    __syncthreads();

    // Scores of rows ty + 16 i against keys tx + 16 j.
    float sc[4][4];
    forge_fa_dot64(sc, q_s, k_s, ty, tx);

    // Causal mask, then the running max and sum of each row (attention_tiled.cu).
    float corr[4];
    forge_fa_online_softmax(sc, m, l, corr, p_s, FORGE_FA64_LD, ty, tx, t0, s0, T, pos);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) o[i][k] *= corr[i];
    __syncthreads();

    // O += P V: rows ty + 16 i, dimensions 4 tx .. 4 tx + 3, keys 4 at a time.
    forge_fa_acc64(o, p_s, v_s, 64, ty, tx);
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 t = t0 + ty + 16 * i;
    if (t >= T) continue;
    const float inv = 1.0f / l[i];
    float4 r;
    r.x = o[i][0] * inv;
    r.y = o[i][1] * inv;
    r.z = o[i][2] * inv;
    r.w = o[i][3] * inv;
    *reinterpret_cast<float4*>(out + (b * T + t) * C + h * 64 + 4 * tx) = r;
  }
}
