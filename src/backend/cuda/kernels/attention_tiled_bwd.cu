// The gradient of causal attention without caches (ops.h attention_bwd) at head dimension 64,
// flash-attention style: no [T, T] matrix in memory, the probabilities recomputed per 64 x 64
// tile from the queries, the keys and each row's log-sum-exp. Two kernels, so that every
// gradient element is written once by one block (no float atomics: the same bits every run):
//   forge_attention_bwd_dq   one block per (64 queries, head): first each row's lse and
//                            D_t = dy_t . out_t (to `stats` for the second kernel), then
//                            dq_t = scale * sum_s dS_ts k_s over the keys the tile sees;
//   forge_attention_bwd_dkv  one block per (64 keys, head): over the query tiles from its own
//                            on, dv_s = sum_t P_ts dy_t and dk_s = scale * sum_t dS_ts q_t;
// where P_ts = exp(scale q_t . k_s - lse_t) (s <= t) and dS_ts = P_ts (dy_t . v_s - D_t).
//
// qkv [B, T, 3C] (q|k|v, heads contiguous), out and dy [B, T, C], dqkv [B, T, 3C], C = 64 nh;
// stats [2, B*nh, T] floats of scratch (lse, then D). All 16-byte aligned (the host checks).
// Grid (ceil(T / 64), B*nh), 256 threads; thread (ty, tx) = (threadIdx.x / 16, threadIdx.x %
// 16) owns tile rows ty + 16 i (i < 4): score columns tx + 16 j, dimensions 4 tx .. 4 tx + 3.
// The queries are loaded times scale, so scale q . k is one product and dk needs no scale.
// Dynamic shared memory: 5 (dq) or 6 (dkv) tiles of [64][68] floats, plus 2 x 64 floats for
// dkv's lse and D: 87,040 and 104,960 bytes (the host raises the 48 KiB default).
//
// The _bf16 and _tf32 twins (precision bf16 or tf32; same arguments, grid and memory) run the
// 64 x 64 x 64 tile products on tensor cores (attention_tc.cu: bf16 or tf32 operands, fp32
// sums). Their scores and dP
// go through a shared tile (the dS tile, or P^T's and dS^T's in dkv) to the (ty, tx) layout
// above, so the masking, the row statistics and dS are the fp32 kernels' own; their dq, dk
// and dv sums stay in the tensor cores' accumulator layout over the whole walk.

// Each row's D_t = dy_t . out_t for rows t0 + ty + 16 i (0 past T): 16 lanes of a warp half
// each add 4 dimensions.
static __device__ __forceinline__ void forge_fab_row_dots(float (&d)[4], const float* dy,
                                                          const float* out, i64 b, i64 h, i64 T,
                                                          i64 C, i64 t0, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 t = t0 + ty + 16 * i;
    float s = 0.0f;
    if (t < T) {
      const float4 a = *reinterpret_cast<const float4*>(dy + (b * T + t) * C + h * 64 + 4 * tx);
      const float4 o = *reinterpret_cast<const float4*>(out + (b * T + t) * C + h * 64 + 4 * tx);
      s = a.x * o.x + a.y * o.y + a.z * o.z + a.w * o.w;
    }
    for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    d[i] = s;
  }
}

// Scores a . b^T of thread (ty, tx)'s elements (forge_fa_dot64). On tensor cores (MMA not
// FORGE_MMA_NONE) through the shared tile `scratch`: the barrier first lets its previous
// readers finish.
template <int MMA>
static __device__ __forceinline__ void forge_fab_dot(float (&sc)[4][4], const float* a,
                                                     const float* b, float* scratch, int ty,
                                                     int tx) {
  if constexpr (MMA != FORGE_MMA_NONE) {
    __syncthreads();
    forge_tc_dot64<FORGE_FA64_LD, MMA>(scratch, a, b);
    __syncthreads();
    forge_tc_take<FORGE_FA64_LD>(sc, scratch, ty, tx);
  } else {
    forge_fa_dot64(sc, a, b, ty, tx);
  }
}

// acc += p . v over 64 rows of v (both [64][68] tiles): (ty, tx)'s 4 rows x 4 dimensions, or
// on tensor cores the warp's accumulator block.
template <int MMA>
static __device__ __forceinline__ void forge_fab_acc(float (&acc)[4][4], const float* p,
                                                     const float* v, int ty, int tx) {
  if constexpr (MMA != FORGE_MMA_NONE)
    forge_tc_acc64<FORGE_FA64_LD, FORGE_FA64_LD, MMA>(acc, p, v);
  else
    forge_fa_acc64(acc, p, v, FORGE_FA64_LD, ty, tx);
}

// Rows r0 + (the warp's rows) of `dst` (row stride `stride`, at column offset 0 of the head)
// = mul * acc, for rows < T.
static __device__ __forceinline__ void forge_tc_store_rows(float* dst, i64 stride, i64 r0, i64 T,
                                                           const float (&acc)[4][4], float mul) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const i64 r = r0 + 16 * (w & 3) + g + 8 * half;
    if (r >= T) continue;
    float* row = dst + r * stride + 32 * (w >> 2) + 2 * q;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      *reinterpret_cast<float2*>(row + 8 * nt) =
          forge_f2(acc[nt][2 * half] * mul, acc[nt][2 * half + 1] * mul);
  }
}

// Rows r0 .. of `dst` (row stride `stride`) = mul * acc (forge_fab_acc's layout), rows < T.
template <bool TC>
static __device__ __forceinline__ void forge_fab_store(float* dst, i64 stride, i64 r0, i64 T,
                                                       const float (&acc)[4][4], float mul, int ty,
                                                       int tx) {
  if constexpr (TC) {
    forge_tc_store_rows(dst, stride, r0, T, acc, mul);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const i64 r = r0 + ty + 16 * i;
      if (r < T)
        *reinterpret_cast<float4*>(dst + r * stride + 4 * tx) =
            forge_f4(acc[i][0] * mul, acc[i][1] * mul, acc[i][2] * mul, acc[i][3] * mul);
    }
  }
}

template <int MMA>
static __device__ __forceinline__ void forge_attention_bwd_dq_body(const float* qkv,
                                                                   const float* out,
                                                                   const float* dy, float* dqkv,
                                                                   float* stats, i64 B, i64 T,
                                                                   i64 nh, float scale) {
  extern __shared__ float4 forge_fab_dq_smem4[];
  if (blockDim.x != 256) return;                                      // refused by the host
  const i64 tile = (i64)gridDim.x - 1 - blockIdx.x, bh = blockIdx.y;  // longest tiles first
  if (bh >= B * nh) return;
  const i64 b = bh / nh, h = bh % nh, C = nh * 64;
  const i64 tile_floats = FORGE_FA_ROWS * FORGE_FA64_LD;
  float* q_s = reinterpret_cast<float*>(forge_fab_dq_smem4);
  float* dy_s = q_s + tile_floats;
  float* k_s = dy_s + tile_floats;
  float* v_s = k_s + tile_floats;
  float* ds_s = v_s + tile_floats;  // dS (on tensor cores first the scores, then dP)

  const i64 t0 = tile * FORGE_FA_ROWS;
  const i64 n_keys = (t0 + FORGE_FA_ROWS < T ? t0 + FORGE_FA_ROWS : T);  // the last row's keys
  const float* q_base = qkv + b * T * 3 * C + h * 64;
  const float* k_base = q_base + C;
  const float* v_base = q_base + 2 * C;
  forge_fa_load_tile(q_s, FORGE_FA64_LD, q_base, 3 * C, t0, T, 64, scale, true);
  forge_fa_load_tile(dy_s, FORGE_FA64_LD, dy + b * T * C + h * 64, C, t0, T, 64, 1.0f, true);
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  float dsum[4];
  forge_fab_row_dots(dsum, dy, out, b, h, T, C, t0, ty, tx);

  // Pass 1: each row's running max m and sum l of exp(score - m), then lse = m + log l.
  float m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = forge_neg_inf();
    l[i] = 0.0f;
  }
  for (i64 s0 = 0; s0 < n_keys; s0 += FORGE_FA_ROWS) {
    __syncthreads();  // the previous tile's readers are done (and q_s is written)
    forge_fa_load_tile(k_s, FORGE_FA64_LD, k_base, 3 * C, s0, n_keys, 64, 1.0f, true);
    __syncthreads();
    float sc[4][4];
    forge_fab_dot<MMA>(sc, q_s, k_s, ds_s, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const i64 t = t0 + ty + 16 * i;
      float mx = forge_neg_inf();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (t >= T || s0 + tx + 16 * j > t) sc[i][j] = forge_neg_inf();
        mx = fmaxf(mx, sc[i][j]);
      }
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[i], mx);
      const float base = m_new == forge_neg_inf() ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) sum += expf(sc[i][j] - base);
      for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      l[i] = l[i] * expf(m[i] - base) + sum;
      m[i] = m_new;
    }
  }
  float lse[4];
  const i64 BHT = B * nh * T;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 t = t0 + ty + 16 * i;
    lse[i] = t < T ? m[i] + logf(l[i]) : 0.0f;  // a real row sees its own key: l >= 1
    if (t < T && tx == 0) {
      stats[bh * T + t] = lse[i];
      stats[BHT + bh * T + t] = dsum[i];
    }
  }

  // Pass 2: dS of each tile, then dq += dS k.
  float dq[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
  for (i64 s0 = 0; s0 < n_keys; s0 += FORGE_FA_ROWS) {
    __syncthreads();  // the previous tile's readers are done
    forge_fa_load_tile(k_s, FORGE_FA64_LD, k_base, 3 * C, s0, n_keys, 64, 1.0f, true);
    forge_fa_load_tile(v_s, FORGE_FA64_LD, v_base, 3 * C, s0, n_keys, 64, 1.0f, true);
    __syncthreads();
    float sc[4][4], dp[4][4];
    forge_fab_dot<MMA>(sc, q_s, k_s, ds_s, ty, tx);
    forge_fab_dot<MMA>(dp, dy_s, v_s, ds_s, ty, tx);  // dP_ts = dy_t . v_s
    // Each thread writes the dS elements it read (on tensor cores): no barrier between.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const i64 t = t0 + ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const i64 s = s0 + tx + 16 * j;
        const float p = t < T && s <= t ? expf(sc[i][j] - lse[i]) : 0.0f;
        ds_s[(ty + 16 * i) * FORGE_FA64_LD + tx + 16 * j] = p * (dp[i][j] - dsum[i]);
      }
    }
    __syncthreads();
    forge_fab_acc<MMA>(dq, ds_s, k_s, ty, tx);
  }
  forge_fab_store<MMA != FORGE_MMA_NONE>(dqkv + b * T * 3 * C + h * 64, 3 * C, t0, T, dq, scale, ty,
                                         tx);
}

template <int MMA>
static __device__ __forceinline__ void forge_attention_bwd_dkv_body(const float* qkv,
                                                                    const float* dy, float* dqkv,
                                                                    const float* stats, i64 B,
                                                                    i64 T, i64 nh, float scale) {
  extern __shared__ float4 forge_fab_dkv_smem4[];
  if (blockDim.x != 256) return;                                    // refused by the host
  const i64 s0 = (i64)blockIdx.x * FORGE_FA_ROWS, bh = blockIdx.y;  // key tile 0 (most work) first
  if (bh >= B * nh) return;
  const i64 b = bh / nh, h = bh % nh, C = nh * 64;
  const i64 tile_floats = FORGE_FA_ROWS * FORGE_FA64_LD;
  float* k_s = reinterpret_cast<float*>(forge_fab_dkv_smem4);
  float* v_s = k_s + tile_floats;
  float* q_s = v_s + tile_floats;
  float* dy_s = q_s + tile_floats;
  float* p_s = dy_s + tile_floats;     // P^T: [key][query]
  float* ds_s = p_s + tile_floats;     // dS^T: [key][query]
  float* lse_s = ds_s + tile_floats;   // [64]
  float* d_s = lse_s + FORGE_FA_ROWS;  // [64]

  const float* q_base = qkv + b * T * 3 * C + h * 64;
  forge_fa_load_tile(k_s, FORGE_FA64_LD, q_base + C, 3 * C, s0, T, 64, 1.0f, true);
  forge_fa_load_tile(v_s, FORGE_FA64_LD, q_base + 2 * C, 3 * C, s0, T, 64, 1.0f, true);
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const i64 BHT = B * nh * T;
  float dk[4][4], dv[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
  }

  // The query tiles that see these keys: from the diagonal tile (t0 = s0) to the end.
  for (i64 t0 = s0; t0 < T; t0 += FORGE_FA_ROWS) {
    __syncthreads();  // the previous tile's readers are done (and k_s, v_s are written)
    forge_fa_load_tile(q_s, FORGE_FA64_LD, q_base, 3 * C, t0, T, 64, scale, true);
    forge_fa_load_tile(dy_s, FORGE_FA64_LD, dy + b * T * C + h * 64, C, t0, T, 64, 1.0f, true);
    if (threadIdx.x < FORGE_FA_ROWS) {
      const i64 t = t0 + threadIdx.x;
      lse_s[threadIdx.x] = t < T ? stats[bh * T + t] : 0.0f;
      d_s[threadIdx.x] = t < T ? stats[BHT + bh * T + t] : 0.0f;
    }
    __syncthreads();
    // Rows ty + 16 i are keys, columns tx + 16 j queries: P^T and dS^T.
    float sc[4][4], dp[4][4];
    forge_fab_dot<MMA>(sc, k_s, q_s, p_s, ty, tx);
    forge_fab_dot<MMA>(dp, v_s, dy_s, ds_s, ty, tx);  // dP^T_st = v_s . dy_t
    // Each thread writes the P^T and dS^T elements it read (on tensor cores): no barrier between.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const i64 s = s0 + ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tx + 16 * j;
        const i64 t = t0 + c;
        const float p = t < T && s <= t ? expf(sc[i][j] - lse_s[c]) : 0.0f;
        p_s[(ty + 16 * i) * FORGE_FA64_LD + c] = p;
        ds_s[(ty + 16 * i) * FORGE_FA64_LD + c] = p * (dp[i][j] - d_s[c]);
      }
    }
    __syncthreads();
    forge_fab_acc<MMA>(dv, p_s, dy_s, ty, tx);  // dv_s += P_ts dy_t
    forge_fab_acc<MMA>(dk, ds_s, q_s, ty, tx);  // dk_s += dS_ts (scale q_t)
  }
  float* base = dqkv + b * T * 3 * C + h * 64;
  forge_fab_store<MMA != FORGE_MMA_NONE>(base + C, 3 * C, s0, T, dk, 1.0f, ty, tx);
  forge_fab_store<MMA != FORGE_MMA_NONE>(base + 2 * C, 3 * C, s0, T, dv, 1.0f, ty, tx);
}

#define FORGE_FAB_ENTRIES(suffix, mma)                                                         \
  extern "C" __global__ void __launch_bounds__(256, 2) forge_attention_bwd_dq##suffix(         \
      const float* qkv, const float* out, const float* dy, float* dqkv, float* stats, i64 B,   \
      i64 T, i64 nh, float scale) {                                                            \
    forge_attention_bwd_dq_body<mma>(qkv, out, dy, dqkv, stats, B, T, nh, scale);              \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(256, 2)                                         \
      forge_attention_bwd_dkv##suffix(const float* qkv, const float* dy, float* dqkv,          \
                                      const float* stats, i64 B, i64 T, i64 nh, float scale) { \
    forge_attention_bwd_dkv_body<mma>(qkv, dy, dqkv, stats, B, T, nh, scale);                  \
  }
FORGE_FAB_ENTRIES(, FORGE_MMA_NONE)
FORGE_FAB_ENTRIES(_bf16, FORGE_MMA_BF16)
FORGE_FAB_ENTRIES(_tf32, FORGE_MMA_TF32)
