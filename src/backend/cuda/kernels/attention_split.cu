// Causal attention of a few new queries (a decode step: T <= 8) over a KV cache, with the
// keys split over many blocks: grid (ceil(cap / 64), T, B*nh), 256 threads, block j takes
// keys [64 j, 64 j + 64) of its query. A decode step has only nh = 12 heads, so one block per
// head (attention.cu) would leave most of the GPU idle and walk its keys one latency at a
// time; here every key and value read of a chunk is in flight at once.
//
// Each block writes its chunk's (max score m_j, sum of exp l_j, unnormalized output acc_j)
// to `partials`; the last block of a (query, head) to finish (a ticket counter, reset by that
// block for the next launch) combines the chunks in chunk order:
//   M = max_j m_j, L = sum_j l_j exp(m_j - M), out = (sum_j acc_j exp(m_j - M)) * (1 / L)
// so the result has the same bits on every run whichever block finishes last. As the CPU:
// the query is scaled first, p = exp(score - max), values weighted, then times 1 / sum.
//
// The new keys and values (rows pos .. pos + T - 1) are read from qkv, not the cache, and the
// blocks of query 0 store them into the cache (forge_kv_store's work, without its launch):
// no block reads a cache row that this launch writes.
//
// qkv: [B, T, 3C], C = nh * hd, hd % 4 == 0, hd <= 128, 16-byte aligned rows (the host
// checks). k_cache, v_cache: [B*nh, cap, hd]. out: [B, T, C]. pos_ptr, when not null,
// overrides pos (clamped to cap - T, as forge_kv_store). partials: [T * B*nh, chunks, hd + 2].
// counters: T * B*nh zeros (u32), left zero.

#define FORGE_SPLIT_KEYS 64

extern "C" __global__ void __launch_bounds__(256)
    forge_attention_split(const float* qkv, float* k_cache, float* v_cache, float* out, i64 B,
                          i64 T, i64 nh, i64 hd, i64 cap, i64 pos, const u32* pos_ptr, float scale,
                          float* partials, u32* counters) {
  __shared__ float q_s[FORGE_ATTN_MAX_HD];
  __shared__ float p_s[FORGE_SPLIT_KEYS];
  __shared__ float part_s[FORGE_ATTN_WARPS][FORGE_ATTN_MAX_HD];
  __shared__ u32 ticket_s;
  if (hd > FORGE_ATTN_MAX_HD || (hd & 3) != 0 || blockDim.x != 256) return;  // host-refused
  forge_let_next_start();
  forge_wait_for_previous();  // for an early launch (the host launches it normally)
  const i64 j = blockIdx.x, t = blockIdx.y, bh = blockIdx.z;
  const i64 chunks = gridDim.x;
  const i64 b = bh / nh, h = bh % nh, C = nh * hd;
  if (pos_ptr != nullptr) {
    pos = (i64)pos_ptr[0];
    if (pos > cap - T) pos = cap - T;
  }
  const i64 n = pos + t + 1;  // keys query t sees
  const i64 s0 = j * FORGE_SPLIT_KEYS;
  const i64 nk = n - s0 < FORGE_SPLIT_KEYS ? (n - s0 > 0 ? n - s0 : 0) : FORGE_SPLIT_KEYS;
  float* kc = k_cache + bh * cap * hd;
  float* vc = v_cache + bh * cap * hd;
  const float* new_k = qkv + b * T * 3 * C + C + h * hd;  // row r: + r * 3C
  const float* new_v = new_k + C;

  // Query 0's blocks store the new keys and values of their chunk.
  if (t == 0) {
    const i64 lo = pos > s0 ? pos : s0;
    const i64 hi = pos + T < s0 + FORGE_SPLIT_KEYS ? pos + T : s0 + FORGE_SPLIT_KEYS;
    for (i64 i = threadIdx.x; i < (hi - lo) * hd; i += blockDim.x) {
      const i64 s = lo + i / hd, d = i % hd;
      kc[s * hd + d] = new_k[(s - pos) * 3 * C + d];
      vc[s * hd + d] = new_v[(s - pos) * 3 * C + d];
    }
  }

  const i64 slot = t * B * nh + bh;
  float* part = partials + (slot * chunks + j) * (hd + 2);
  float m_j = forge_neg_inf(), l_j = 0.0f;
  if (nk > 0) {  // uniform over the block
    const float* q = qkv + (b * T + t) * 3 * C + h * hd;
    for (i64 d = threadIdx.x; d < hd; d += blockDim.x) q_s[d] = q[d] * scale;
    __syncthreads();
    // Scores: 4 lanes per key, lane r of the 4 reads the key's float4s r, r + 4, ...
    {
      const int key = threadIdx.x >> 2, r = threadIdx.x & 3;
      const i64 s = s0 + key;
      float acc = 0.0f;
      if (key < nk) {
        const float* k = s >= pos ? new_k + (s - pos) * 3 * C : kc + s * hd;
        float4 kv[FORGE_ATTN_MAX_HD / 16];
#pragma unroll
        for (int u = 0; u < FORGE_ATTN_MAX_HD / 16; ++u) {
          const i64 d = 4 * (r + 4 * u);
          if (d < hd) kv[u] = *reinterpret_cast<const float4*>(k + d);
        }
#pragma unroll
        for (int u = 0; u < FORGE_ATTN_MAX_HD / 16; ++u) {
          const i64 d = 4 * (r + 4 * u);
          if (d < hd) {
            acc += q_s[d] * kv[u].x;
            acc += q_s[d + 1] * kv[u].y;
            acc += q_s[d + 2] * kv[u].z;
            acc += q_s[d + 3] * kv[u].w;
          }
        }
      }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      acc += __shfl_xor_sync(0xffffffffu, acc, 2);
      if (r == 0 && key < nk) p_s[key] = acc;
    }
    __syncthreads();
    float mx = threadIdx.x < nk ? p_s[threadIdx.x] : forge_neg_inf();
    m_j = forge_block_max(mx);
    const float e = threadIdx.x < nk ? expf(p_s[threadIdx.x] - m_j) : 0.0f;
    l_j = forge_block_sum(e);  // its barriers order the p_s writes below after every read
    if (threadIdx.x < nk) p_s[threadIdx.x] = e;
    __syncthreads();
    // Weighted values: warp w takes keys 8w .. 8w + 7 (all 8 rows in flight), lane l the
    // dimensions l, l + 32, ...; then the 8 warps' rows are summed in warp order.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc[FORGE_ATTN_MAX_HD / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    float vv[8][FORGE_ATTN_MAX_HD / 32];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const i64 key = warp * 8 + u, s = s0 + key;
      const float* v = key < nk ? (s >= pos ? new_v + (s - pos) * 3 * C : vc + s * hd) : nullptr;
#pragma unroll
      for (int i = 0; i < FORGE_ATTN_MAX_HD / 32; ++i) {
        const i64 d = lane + 32 * i;
        vv[u][i] = v != nullptr && d < hd ? v[d] : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const i64 key = warp * 8 + u;
      const float p = key < nk ? p_s[key] : 0.0f;
#pragma unroll
      for (int i = 0; i < FORGE_ATTN_MAX_HD / 32; ++i) acc[i] += p * vv[u][i];
    }
#pragma unroll
    for (int i = 0; i < FORGE_ATTN_MAX_HD / 32; ++i) {
      const i64 d = lane + 32 * i;
      if (d < hd) part_s[warp][d] = acc[i];
    }
    __syncthreads();
    for (i64 d = threadIdx.x; d < hd; d += blockDim.x) {
      float r = 0.0f;
      for (int w = 0; w < FORGE_ATTN_WARPS; ++w) r += part_s[w][d];
      part[2 + d] = r;
    }
  }
  if (threadIdx.x == 0) {
    part[0] = m_j;
    part[1] = l_j;
  }
  // Publish this chunk, then take a ticket: the block with the last one combines.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ticket_s = atomicAdd(counters + slot, 1u);
  __syncthreads();
  if (ticket_s != (u32)(chunks - 1)) return;  // uniform over the block
  __threadfence();
  const volatile float* all = partials + slot * chunks * (hd + 2);
  float M = forge_neg_inf();
  for (i64 c = 0; c < chunks; ++c)
    if (all[c * (hd + 2) + 1] > 0.0f) M = fmaxf(M, all[c * (hd + 2)]);
  float L = 0.0f;
  for (i64 c = 0; c < chunks; ++c) {
    const float l = all[c * (hd + 2) + 1];
    if (l > 0.0f) L += l * expf(all[c * (hd + 2)] - M);
  }
  const float inv = 1.0f / L;
  float* y = out + (b * T + t) * C + h * hd;
  for (i64 d = threadIdx.x; d < hd; d += blockDim.x) {
    float r = 0.0f;
    for (i64 c = 0; c < chunks; ++c) {
      const float l = all[c * (hd + 2) + 1];
      if (l > 0.0f) r += all[c * (hd + 2) + 2 + d] * expf(all[c * (hd + 2)] - M);
    }
    y[d] = r * inv;
  }
  if (threadIdx.x == 0) counters[slot] = 0u;  // ready for the next launch
}
