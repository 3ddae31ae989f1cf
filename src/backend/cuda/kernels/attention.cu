// Fused causal self-attention (inference): one block of 256 threads (8 warps) per
// (query t, head b*nh + h), grid (T, B*nh). The [T, S] score matrix is never stored; each
// block keeps only its own query's scores in shared memory.
//
// Dynamic shared memory: (S_max + 128 + 8 * 128) floats, S_max = cap with caches, T without
// (a query sees at most pos + T <= cap keys). Layout: [0, 128) the scaled query,
// [128, 1152) the 8 warps' partial outputs, then the scores (overwritten by their
// exponentials). Beyond 48 KiB (S_max > ~11100) the host raises the function's dynamic
// shared limit. The block reductions use their own static shared memory (256 bytes).
//
// qkv: [B, T, 3C] (q | k | v, heads contiguous), C = nh * hd, hd <= 128.
// k_cache, v_cache: [B*nh, cap, hd] or both null. out: [B, T, C] (heads merged).
//   out[b, t, h*hd + d] = sum_{s <= pos+t} softmax_s(q_t . k_s * scale) v_s[d]
// With caches the new keys/values are already in rows pos..pos+T-1 (forge_kv_store ran
// before on the same stream) and every key is read from the cache; pos_ptr, when not null,
// overrides pos (read on the device, clamped to cap - T like forge_kv_store). Without caches
// pos is 0 and the keys/values are parts 1 and 2 of qkv.
// As the CPU (attention_rows_loop in src/backend/cpu/attention_loops.h): the query is scaled
// first, p = exp(score - max), and the weighted sum of values is multiplied by 1 / sum(p).
// The sums' order differs from the CPU's (keys are split over the warps), within 1e-4.
//
// Why this shape: a decode step has one query per head, so the block's threads must share
// the keys, not the head dimension. Scores: one thread per key, a whole dot product each
// (float4 reads of the key row), no shuffles. Output: warp w takes keys w, w + 8, ...,
// its lanes the head dimensions (each key's value row is one coalesced read); the 8
// partial rows are then summed in warp order, so the result is the same on every run.

#define FORGE_ATTN_THREADS 256
#define FORGE_ATTN_WARPS 8
#define FORGE_ATTN_MAX_HD 128

// Where head bh = b * nh + h reads its keys and values, and the first query's position:
// the caches (pos from pos_ptr when given, clamped to cap - T), or qkv's parts 1 and 2
// (pos 0). Shared with attention_tiled.cu.
struct ForgeAttnKv {
  const float* k;
  const float* v;
  i64 stride;  // floats between key rows
  i64 pos;
};

static __device__ __forceinline__ ForgeAttnKv forge_attn_kv(const float* qkv, const float* k_cache,
                                                            const float* v_cache, i64 bh, i64 T,
                                                            i64 nh, i64 hd, i64 cap, i64 pos,
                                                            const u32* pos_ptr) {
  if (k_cache != nullptr) {
    if (pos_ptr != nullptr) {
      pos = (i64)pos_ptr[0];
      if (pos > cap - T) pos = cap - T;
    }
    return {k_cache + bh * cap * hd, v_cache + bh * cap * hd, hd, pos};
  }
  const i64 C = nh * hd;
  const float* k = qkv + (bh / nh) * T * 3 * C + C + (bh % nh) * hd;
  return {k, k + C, 3 * C, 0};
}

extern "C" __global__ void forge_attention(const float* qkv, const float* k_cache,
                                           const float* v_cache, float* out, i64 B, i64 T, i64 nh,
                                           i64 hd, i64 cap, i64 pos, const u32* pos_ptr,
                                           float scale) {
  extern __shared__ float forge_attn_smem[];
  // Both refused by the host; never write past q_s or the partial rows.
  if (hd > FORGE_ATTN_MAX_HD || blockDim.x != FORGE_ATTN_THREADS) return;
  float* q_s = forge_attn_smem;                                // [128]
  float* part_s = forge_attn_smem + FORGE_ATTN_MAX_HD;         // [8][128]
  float* p_s = part_s + FORGE_ATTN_WARPS * FORGE_ATTN_MAX_HD;  // [S_max]
  const i64 t = blockIdx.x, bh = blockIdx.y;
  if (t >= T || bh >= B * nh) return;  // uniform over the block
  const i64 b = bh / nh, h = bh % nh;
  const i64 C = nh * hd;

  const ForgeAttnKv kv = forge_attn_kv(qkv, k_cache, v_cache, bh, T, nh, hd, cap, pos, pos_ptr);
  const float* k_base = kv.k;
  const float* v_base = kv.v;
  const i64 kv_stride = kv.stride;
  pos = kv.pos;
  const i64 n = pos + t + 1;  // keys this query sees

  const float* q = qkv + (b * T + t) * 3 * C + h * hd;
  for (i64 d = threadIdx.x; d < hd; d += blockDim.x) q_s[d] = q[d] * scale;
  __syncthreads();

  // Scores: thread s computes key s's dot product in dimension order.
  const bool vec4 = hd % 4 == 0 && kv_stride % 4 == 0 && ((u64)k_base & 15) == 0;
  for (i64 s = threadIdx.x; s < n; s += blockDim.x) {
    const float* k = k_base + s * kv_stride;
    float acc = 0.0f;
    if (vec4) {
#pragma unroll 4
      for (i64 d = 0; d < hd; d += 4) {
        const float4 kv = *reinterpret_cast<const float4*>(k + d);
        acc += q_s[d] * kv.x;
        acc += q_s[d + 1] * kv.y;
        acc += q_s[d + 2] * kv.z;
        acc += q_s[d + 3] * kv.w;
      }
    } else {
      for (i64 d = 0; d < hd; ++d) acc += q_s[d] * k[d];
    }
    p_s[s] = acc;
  }
  __syncthreads();

  float mx = forge_neg_inf();
  for (i64 s = threadIdx.x; s < n; s += blockDim.x) mx = fmaxf(mx, p_s[s]);
  mx = forge_block_max(mx);
  float sum = 0.0f;
  for (i64 s = threadIdx.x; s < n; s += blockDim.x) {
    const float e = expf(p_s[s] - mx);
    p_s[s] = e;
    sum += e;
  }
  // forge_block_sum's barriers also make every p_s write visible to the loop below.
  const float inv = 1.0f / forge_block_sum(sum);

  // Output: warp w sums keys w, w + 8, ...; lane l owns dimensions l, l + 32, l + 64, l + 96.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[FORGE_ATTN_MAX_HD / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
  // Unrolled so that a warp has 8 value rows in flight: the loop is bound by their latency.
#pragma unroll 8
  for (i64 s = warp; s < n; s += FORGE_ATTN_WARPS) {
    const float p = p_s[s];
    const float* v = v_base + s * kv_stride;
#pragma unroll
    for (int j = 0; j < FORGE_ATTN_MAX_HD / 32; ++j) {
      const i64 d = lane + 32 * j;
      if (d < hd) acc[j] += p * v[d];
    }
  }
#pragma unroll
  for (int j = 0; j < FORGE_ATTN_MAX_HD / 32; ++j) {
    const i64 d = lane + 32 * j;
    if (d < hd) part_s[warp * FORGE_ATTN_MAX_HD + d] = acc[j];
  }
  __syncthreads();
  float* y = out + (b * T + t) * C + h * hd;
  for (i64 d = threadIdx.x; d < hd; d += blockDim.x) {
    float r = 0.0f;
    for (int w = 0; w < FORGE_ATTN_WARPS; ++w) r += part_s[w * FORGE_ATTN_MAX_HD + d];
    y[d] = r * inv;
  }
}
