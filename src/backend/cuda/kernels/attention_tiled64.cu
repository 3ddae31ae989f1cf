// forge_attention_tiled (attention_tiled.cu) for head dimension 64, GPT-2's at every size:
// the same function, online softmax and tiles, with the inner products reading shared memory
// as float4s. Thread (ty, tx) owns query rows ty + 16 i and, for the scores, key columns
// tx + 16 j (i, j < 4), as there; for the output it owns the 4 adjacent dimensions
// 4 tx .. 4 tx + 3. Per 4 steps of a dot product it reads 4 query and 4 key float4s for 64
// FMAs (attention_tiled.cu: 32 scalar reads), and per 4 keys of P V 4 float4s of P and 4 of V
// for 64 FMAs, so the FMAs, not shared memory, bound the loops.
//
// Split keys (chunk_tiles > 0). Query tile q walks ceil((pos + end of q) / 64) key tiles, so
// with one block per tile the last tile's block is the critical path: a prefill of 1024
// tokens at batch 1 has 16 tiles x 12 heads, and the 16-key-tile blocks run long after the
// short ones are done. With chunk_tiles = S each tile's keys are cut into chunks of S key
// tiles, one block per chunk; a chunk's block writes its rows' (max m, sum l, unnormalized
// output) to `partials`, and the tile's last block to finish (a ticket counter, reset by it)
// combines the chunks in chunk order, as attention_split.cu does, so the bits do not depend
// on which block ends last. A tile of one chunk writes its output directly. The host passes
// chunk_tiles = 0 (one block per tile) when split keys are switched off
// (FORGE_CUDA_SPLIT_ATTENTION=0), when the grid is full anyway, and whenever pos comes from pos_ptr
// (the chunk count depends on pos).
//
// Grid (items, B*nh): items run over the tiles from the last (the most keys) to the first,
// each tile's chunks in key order, so the longest blocks start first. partials: [B*nh, items,
// FORGE_FA64_PART] floats; counters: B*nh * ceil(T / 64) zeros (u32), left zero.
//
// Dynamic shared memory: Q, K and P tiles [64][68] (a row stride of 68 floats puts the 8 rows
// a quarter-warp reads at one column in 8 different 16-byte bank groups) and V [64][64]:
// 68,608 bytes (the host raises the 48 KiB default). qkv and the caches 16-byte aligned with
// rows a multiple of 4 floats (the host checks).

#define FORGE_FA64_PART (2 * 64 + 64 * 64)  // a chunk's m[64], l[64] and output [64][64]

// The (query tile, key chunk) of block `item` (see above); chunks = the tile's chunk count.
struct ForgeFaItem {
  i64 tile, chunk, chunks;
};
static __device__ __forceinline__ ForgeFaItem forge_fa_item(i64 item, i64 T, i64 pos,
                                                            i64 chunk_tiles) {
  ForgeFaItem it{(T + FORGE_FA_ROWS - 1) / FORGE_FA_ROWS - 1, 0, 1};
  for (;; --it.tile) {
    const i64 t_end = (it.tile + 1) * FORGE_FA_ROWS < T ? (it.tile + 1) * FORGE_FA_ROWS : T;
    const i64 key_tiles = (pos + t_end + FORGE_FA_ROWS - 1) / FORGE_FA_ROWS;
    it.chunks = chunk_tiles > 0 ? (key_tiles + chunk_tiles - 1) / chunk_tiles : 1;
    if (item < it.chunks || it.tile == 0) break;
    item -= it.chunks;
  }
  it.chunk = item;
  return it;
}

static __device__ __forceinline__ float4 forge_f4(float x, float y, float z, float w) {
  float4 v;
  v.x = x;
  v.y = y;
  v.z = z;
  v.w = w;
  return v;
}

// Loads that skip L1: partials written by other blocks of the same launch.
static __device__ __forceinline__ float forge_ld_l2(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
static __device__ __forceinline__ float4 forge_ld_l2_4(const float* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

// MMA (attention_tc.cu): FORGE_MMA_NONE for CUDA-core FMAs, or the scores and P V on tensor
// cores with bf16 or tf32 operands (precision bf16 or tf32), V's tile then [64][68] like the
// others (69,632 bytes in all): mma's column reads of a [64][64] tile would hit one bank four
// times. The scores land in the P tile, P V in the K tile (free by then).
template <int MMA>
static __device__ __forceinline__ void forge_attention_tiled64_body(
    const float* qkv, const float* k_cache, const float* v_cache, float* out, i64 B, i64 T, i64 nh,
    i64 hd, i64 cap, i64 pos, const u32* pos_ptr, float scale, i64 chunk_tiles, float* partials,
    u32* counters) {
  extern __shared__ float4 forge_fa64_smem4[];
  constexpr bool TC = MMA != FORGE_MMA_NONE;
  constexpr int VLD = TC ? FORGE_FA64_LD : 64;
  if (hd != 64 || blockDim.x != 256) return;  // refused by the host
  const i64 bh = blockIdx.y;
  if (bh >= B * nh) return;
  const i64 b = bh / nh, h = bh % nh;
  const i64 C = nh * 64;
  float* q_s = reinterpret_cast<float*>(forge_fa64_smem4);  // [64][68]
  float* k_s = q_s + FORGE_FA_ROWS * FORGE_FA64_LD;         // [64][68]
  float* p_s = k_s + FORGE_FA_ROWS * FORGE_FA64_LD;         // [64][68]
  float* v_s = p_s + FORGE_FA_ROWS * FORGE_FA64_LD;         // [64][VLD]

  const ForgeAttnKv kv = forge_attn_kv(qkv, k_cache, v_cache, bh, T, nh, 64, cap, pos, pos_ptr);
  pos = kv.pos;
  const ForgeFaItem it = forge_fa_item(blockIdx.x, T, pos, chunk_tiles);
  const i64 t0 = it.tile * FORGE_FA_ROWS;
  const i64 t_last = (t0 + FORGE_FA_ROWS < T ? t0 + FORGE_FA_ROWS : T) - 1;
  const i64 n_keys = pos + t_last + 1;  // keys the tile's last query sees
  // This block's keys: [k_begin, k_end), whole 64-key tiles but for the tile's last.
  const i64 k_begin = it.chunk * chunk_tiles * FORGE_FA_ROWS;
  const i64 k_end = it.chunks == 1 || k_begin + chunk_tiles * FORGE_FA_ROWS > n_keys
                        ? n_keys
                        : k_begin + chunk_tiles * FORGE_FA_ROWS;

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

  for (i64 s0 = k_begin; s0 < k_end; s0 += FORGE_FA_ROWS) {
    __syncthreads();  // the previous tile's readers are done (and q_s is written)
    forge_fa_load_tile(k_s, FORGE_FA64_LD, kv.k, kv.stride, s0, n_keys, 64, 1.0f, true);
    forge_fa_load_tile(v_s, VLD, kv.v, kv.stride, s0, n_keys, 64, 1.0f, true);
    __syncthreads();

    // Scores of rows ty + 16 i against keys tx + 16 j.
    float sc[4][4];
    if constexpr (TC) {
      forge_tc_dot64<FORGE_FA64_LD, MMA>(p_s, q_s, k_s);
      __syncthreads();
      forge_tc_take<FORGE_FA64_LD>(sc, p_s, ty, tx);  // softmax rewrites just these elements
    } else {
      forge_fa_dot64(sc, q_s, k_s, ty, tx);
    }

    // Causal mask, then the running max and sum of each row (attention_tiled.cu).
    float corr[4];
    forge_fa_online_softmax(sc, m, l, corr, p_s, FORGE_FA64_LD, ty, tx, t0, s0, T, pos);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) o[i][k] *= corr[i];
    __syncthreads();

    // O += P V: rows ty + 16 i, dimensions 4 tx .. 4 tx + 3, keys 4 at a time.
    if constexpr (TC) {
      float pv[4][4];
      forge_tc_zero(pv);
      forge_tc_acc64<FORGE_FA64_LD, VLD, MMA>(pv, p_s, v_s);
      forge_tc_store<FORGE_FA64_LD>(k_s, pv);  // the scores' readers passed the barrier above
      __syncthreads();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 r =
            *reinterpret_cast<const float4*>(k_s + (ty + 16 * i) * FORGE_FA64_LD + 4 * tx);
        o[i][0] += r.x;
        o[i][1] += r.y;
        o[i][2] += r.z;
        o[i][3] += r.w;
      }
    } else {
      forge_fa_acc64(o, p_s, v_s, 64, ty, tx);
    }
  }

  if (it.chunks == 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const i64 t = t0 + ty + 16 * i;
      if (t >= T) continue;
      const float inv = 1.0f / l[i];
      const float4 r = forge_f4(o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv);
      *reinterpret_cast<float4*>(out + (b * T + t) * C + h * 64 + 4 * tx) = r;
    }
    return;
  }

  // A chunk of several: publish (m, l, O) of its rows, then take a ticket; the tile's last
  // block combines all its chunks in chunk order.
  const i64 first = bh * (i64)gridDim.x + blockIdx.x - it.chunk;  // the tile's chunk 0
  float* part = partials + (first + it.chunk) * FORGE_FA64_PART;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    if (tx == 0) {
      part[r] = m[i];
      part[64 + r] = l[i];
    }
    *reinterpret_cast<float4*>(part + 128 + r * 64 + 4 * tx) =
        forge_f4(o[i][0], o[i][1], o[i][2], o[i][3]);
  }
  __threadfence();
  __syncthreads();
  u32* counter = counters + bh * ((T + FORGE_FA_ROWS - 1) / FORGE_FA_ROWS) + it.tile;
  // The ticket lives in q_s, unread since the last tile's scores (no static shared memory:
  // the host gives the kernel the device's whole opt-in limit as dynamic memory).
  volatile u32* ticket = reinterpret_cast<volatile u32*>(q_s);
  if (threadIdx.x == 0) *ticket = atomicAdd(counter, 1u);
  __syncthreads();
  if (*ticket != (u32)(it.chunks - 1)) return;  // uniform over the block
  __threadfence();
  const float* all = partials + first * FORGE_FA64_PART;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    const i64 t = t0 + r;
    if (t >= T) continue;
    // Chunks where the row saw no key (l = 0: only past its causal end) take no part.
    float M = forge_neg_inf();
    for (i64 c = 0; c < it.chunks; ++c)
      if (forge_ld_l2(all + c * FORGE_FA64_PART + 64 + r) > 0.0f)
        M = fmaxf(M, forge_ld_l2(all + c * FORGE_FA64_PART + r));
    float L = 0.0f;
    float4 acc = forge_f4(0.0f, 0.0f, 0.0f, 0.0f);
    for (i64 c = 0; c < it.chunks; ++c) {
      const float* pc = all + c * FORGE_FA64_PART;
      const float lc = forge_ld_l2(pc + 64 + r);
      if (!(lc > 0.0f)) continue;
      const float w = expf(forge_ld_l2(pc + r) - M);
      const float4 oc = forge_ld_l2_4(pc + 128 + r * 64 + 4 * tx);
      L += lc * w;
      acc.x += oc.x * w;
      acc.y += oc.y * w;
      acc.z += oc.z * w;
      acc.w += oc.w * w;
    }
    const float inv = 1.0f / L;
    *reinterpret_cast<float4*>(out + (b * T + t) * C + h * 64 + 4 * tx) =
        forge_f4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  }
  if (threadIdx.x == 0) *counter = 0u;  // ready for the next launch
}

#define FORGE_FA64_ENTRY(name, mma)                                                                \
  extern "C" __global__ void __launch_bounds__(256, 2)                                             \
      name(const float* qkv, const float* k_cache, const float* v_cache, float* out, i64 B, i64 T, \
           i64 nh, i64 hd, i64 cap, i64 pos, const u32* pos_ptr, float scale, i64 chunk_tiles,     \
           float* partials, u32* counters) {                                                       \
    forge_attention_tiled64_body<mma>(qkv, k_cache, v_cache, out, B, T, nh, hd, cap, pos, pos_ptr, \
                                      scale, chunk_tiles, partials, counters);                     \
  }
FORGE_FA64_ENTRY(forge_attention_tiled64, FORGE_MMA_NONE)
FORGE_FA64_ENTRY(forge_attention_tiled64_bf16, FORGE_MMA_BF16)
FORGE_FA64_ENTRY(forge_attention_tiled64_tf32, FORGE_MMA_TF32)
