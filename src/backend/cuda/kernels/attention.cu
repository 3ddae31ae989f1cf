// Fused causal self-attention (inference), the simple O(T * S) kernel: one block of 128
// threads per (query t, head b*nh + h), grid (T, B*nh). The [T, S] score matrix is never
// stored; each block keeps only its own query's scores in shared memory.
//
// Dynamic shared memory: needs (S_max + 128) floats, S_max = cap with caches, T without
// (a query sees at most pos + T <= cap keys). Layout: [0, 128) the scaled query,
// [128, 128 + S_max) the scores, then their exponentials. The host's (S_max + 128 + 64)
// floats are enough; the block reductions use their own static shared memory (256 bytes).
// Beyond 48 KiB (S_max > ~12150) the host must raise the function's dynamic shared limit.
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

#define FORGE_ATTN_THREADS 128
#define FORGE_ATTN_MAX_HD 128

extern "C" __global__ void forge_attention(const float* qkv, const float* k_cache,
                                           const float* v_cache, float* out, i64 B, i64 T, i64 nh,
                                           i64 hd, i64 cap, i64 pos, const u32* pos_ptr,
                                           float scale) {
  extern __shared__ float forge_attn_smem[];
  if (hd > FORGE_ATTN_MAX_HD) return;  // refused by the host; never write past q_s
  float* q_s = forge_attn_smem;                      // [128]
  float* p_s = forge_attn_smem + FORGE_ATTN_MAX_HD;  // [S_max]
  const i64 t = blockIdx.x, bh = blockIdx.y;
  if (t >= T || bh >= B * nh) return;  // uniform over the block
  const i64 b = bh / nh, h = bh % nh;
  const i64 C = nh * hd;

  const float* k_base;
  const float* v_base;
  i64 kv_stride;
  if (k_cache != nullptr) {
    if (pos_ptr != nullptr) {
      pos = (i64)pos_ptr[0];
      if (pos > cap - T) pos = cap - T;
    }
    k_base = k_cache + bh * cap * hd;
    v_base = v_cache + bh * cap * hd;
    kv_stride = hd;
  } else {
    pos = 0;
    k_base = qkv + b * T * 3 * C + C + h * hd;
    v_base = k_base + C;
    kv_stride = 3 * C;
  }
  const i64 n = pos + t + 1;  // keys this query sees

  const float* q = qkv + (b * T + t) * 3 * C + h * hd;
  for (i64 d = threadIdx.x; d < hd; d += blockDim.x) q_s[d] = q[d] * scale;
  __syncthreads();

  // Scores: one warp per key, lanes over the head dimension (coalesced reads of the key row),
  // a warp butterfly for the dot product.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  for (i64 s = warp; s < n; s += n_warps) {
    const float* k = k_base + s * kv_stride;
    float acc = 0.0f;
    for (i64 d = lane; d < hd; d += 32) acc += q_s[d] * k[d];
    acc = forge_warp_sum(acc);
    if (lane == 0) p_s[s] = acc;
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

  // Output: thread d owns dimension d and sums the values in key order (adjacent threads read
  // adjacent floats of each value row).
  float* y = out + (b * T + t) * C + h * hd;
  for (i64 d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (i64 s = 0; s < n; ++s) acc += p_s[s] * v_base[s * kv_stride + d];
    y[d] = acc * inv;
  }
}
