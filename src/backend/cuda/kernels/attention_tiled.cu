// Fused causal self-attention for many queries (prefill): the same function as
// forge_attention (attention.cu; same arguments), computed a tile of 64 queries at a time,
// flash-attention style: each block walks the keys in tiles of 64, keeping a running row
// max m, a running sum l of exp(score - m) and the unnormalised output O in registers, so
// that every key and value row is read once per 64 queries (forge_attention reads it once
// per query) and no [T, S] matrix exists anywhere.
//
// Grid (ceil(T / 64), B*nh), 256 threads; blockIdx.x runs from the last query tile (which
// sees the most keys) to the first, so the longest blocks start first. Thread (ty, tx) =
// (threadIdx.x / 16, threadIdx.x % 16) owns query rows ty + 16 i (i < 4); for the scores,
// key columns tx + 16 j (j < 4) of the tile; for the output, dimensions tx + 16 k
// (k < hd / 16). Rows of 16 lanes share a warp half, so a row's max and sum are 4 shuffles.
//
// Dynamic shared memory: (3 (hd + 1) + 65) * 64 floats (Q, K, V and P tiles; rows padded to an
// odd stride so that 16 lanes reading 16 rows at one column hit 16 banks): 66,560 bytes for
// hd = 64, over the 48 KiB default (the host raises the limit). hd % 16 == 0, hd <= 128.
// As the CPU, the query is scaled first; the sums' order differs (within 1e-4).

#define FORGE_FA_ROWS 64
#define FORGE_FA_MAX_DK 8  // hd / 16 <= 8

// Rows r0 .. r0 + 63 of a row-major [*, hd] matrix (row stride `stride` floats), each value
// times `mul`, into a [64][ld] shared tile (ld >= hd); rows >= n_rows become zeros. With
// vec4 (src 16-byte aligned, stride % 4 == 0) a thread issues all its float4 reads (at most
// 8) before storing any: a tile costs one memory latency, not one per element.
static __device__ __forceinline__ void forge_fa_load_tile(float* tile, i64 ld, const float* src,
                                                          i64 stride, i64 r0, i64 n_rows, i64 hd,
                                                          float mul, bool vec4) {
  if (vec4) {
    const int n4 = (int)(hd >> 2);
    float4 buf[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int e = threadIdx.x + 256 * u, r = e / n4;
      buf[u].x = buf[u].y = buf[u].z = buf[u].w = 0.0f;
      if (e < FORGE_FA_ROWS * n4 && r0 + r < n_rows)
        buf[u] = *reinterpret_cast<const float4*>(src + (r0 + r) * stride + 4 * (e % n4));
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int e = threadIdx.x + 256 * u;
      if (e < FORGE_FA_ROWS * n4) {
        float* d = tile + (e / n4) * ld + 4 * (e % n4);
        d[0] = buf[u].x * mul;
        d[1] = buf[u].y * mul;
        d[2] = buf[u].z * mul;
        d[3] = buf[u].w * mul;
      }
    }
    return;
  }
  for (i64 e = threadIdx.x; e < FORGE_FA_ROWS * hd; e += blockDim.x) {
    const i64 r = e / hd, d = e % hd;
    tile[r * ld + d] = r0 + r < n_rows ? src[(r0 + r) * stride + d] * mul : 0.0f;
  }
}

// The products of the head-dimension-64 kernels (attention_tiled64.cu, attention_tiled_bwd.cu)
// on 64-row shared tiles, thread (ty, tx) = (threadIdx.x / 16, threadIdx.x % 16) of 256.
// forge_fa_dot64: acc[i][j] = sum_d a[ty + 16 i][d] * b[tx + 16 j][d] (both row stride
// FORGE_FA64_LD = 68: the 8 rows a quarter-warp reads at one column fall in 8 different
// 16-byte bank groups), 4 float4s of each per 4 steps for 64 FMAs.
#define FORGE_FA64_LD 68
static __device__ __forceinline__ void forge_fa_dot64(float (&acc)[4][4], const float* a,
                                                      const float* b, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll 2
  for (int d = 0; d < 64; d += 4) {
    float4 av[4], bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      av[i] = *reinterpret_cast<const float4*>(a + (ty + 16 * i) * FORGE_FA64_LD + d);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      bv[j] = *reinterpret_cast<const float4*>(b + (tx + 16 * j) * FORGE_FA64_LD + d);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[i][j] += av[i].x * bv[j].x;
        acc[i][j] += av[i].y * bv[j].y;
        acc[i][j] += av[i].z * bv[j].z;
        acc[i][j] += av[i].w * bv[j].w;
      }
  }
}

// acc[i][k] += sum_c p[ty + 16 i][c] * v[c][4 tx + k] over 64 values of c (p row stride 68, v
// row stride ldv, a multiple of 4): 4 float4s of p and 4 of v per 4 steps for 64 FMAs.
static __device__ __forceinline__ void forge_fa_acc64(float (&acc)[4][4], const float* p,
                                                      const float* v, int ldv, int ty, int tx) {
#pragma unroll 2
  for (int c = 0; c < 64; c += 4) {
    float4 pv[4], vv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      pv[i] = *reinterpret_cast<const float4*>(p + (ty + 16 * i) * FORGE_FA64_LD + c);
#pragma unroll
    for (int u = 0; u < 4; ++u)
      vv[u] = *reinterpret_cast<const float4*>(v + (c + u) * ldv + 4 * tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float p4[4] = {pv[i].x, pv[i].y, pv[i].z, pv[i].w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        acc[i][0] += p4[u] * vv[u].x;
        acc[i][1] += p4[u] * vv[u].y;
        acc[i][2] += p4[u] * vv[u].z;
        acc[i][3] += p4[u] * vv[u].w;
      }
    }
  }
}

// The online softmax step of a 64 x 64 tile of scores: thread (ty, tx) holds rows ty + 16 i,
// keys tx + 16 j (sc[i][j]). Masks the causal future (key s > pos + t) and rows past T,
// updates each row's running max m and sum l, writes p = exp(score - m) to the P tile
// (row stride ld), and returns each row's correction corr = exp(m_old - m_new) by which the
// caller scales its output accumulators. A row with no key yet (only rows past T, or none at
// all) keeps m = -inf: its exponentials are taken against 0 instead, which gives exact zeros.
static __device__ __forceinline__ void forge_fa_online_softmax(float (&sc)[4][4], float (&m)[4],
                                                               float (&l)[4], float (&corr)[4],
                                                               float* p_s, int ld, int ty, int tx,
                                                               i64 t0, i64 s0, i64 T, i64 pos) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 t = t0 + ty + 16 * i;
    float mx = forge_neg_inf();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const i64 s = s0 + tx + 16 * j;
      if (t >= T || s > pos + t) sc[i][j] = forge_neg_inf();
      mx = fmaxf(mx, sc[i][j]);
    }
    for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_new = fmaxf(m[i], mx);
    const float base = m_new == forge_neg_inf() ? 0.0f : m_new;
    corr[i] = expf(m[i] - base);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float p = expf(sc[i][j] - base);
      p_s[(ty + 16 * i) * ld + tx + 16 * j] = p;
      sum += p;
    }
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    l[i] = l[i] * corr[i] + sum;
    m[i] = m_new;
  }
}

extern "C" __global__ void __launch_bounds__(256, 2)
    forge_attention_tiled(const float* qkv, const float* k_cache, const float* v_cache, float* out,
                          i64 B, i64 T, i64 nh, i64 hd, i64 cap, i64 pos, const u32* pos_ptr,
                          float scale) {
  extern __shared__ float forge_fa_smem[];
  // Refused by the host; never index past the tiles or the accumulators.
  if (hd % 16 != 0 || hd > 16 * FORGE_FA_MAX_DK || blockDim.x != 256) return;
  const i64 tile = (i64)gridDim.x - 1 - blockIdx.x, bh = blockIdx.y;
  if (bh >= B * nh) return;
  const i64 b = bh / nh, h = bh % nh;
  const i64 C = nh * hd;
  const i64 ld = hd + 1;                  // the tiles' row stride in shared memory
  float* q_s = forge_fa_smem;             // [64][hd + 1]
  float* k_s = q_s + FORGE_FA_ROWS * ld;  // [64][hd + 1]
  float* v_s = k_s + FORGE_FA_ROWS * ld;  // [64][hd + 1]
  float* p_s = v_s + FORGE_FA_ROWS * ld;  // [64][65]

  const ForgeAttnKv kv = forge_attn_kv(qkv, k_cache, v_cache, bh, T, nh, hd, cap, pos, pos_ptr);
  const float* k_base = kv.k;
  const float* v_base = kv.v;
  const i64 kv_stride = kv.stride;
  pos = kv.pos;
  const i64 t0 = tile * FORGE_FA_ROWS;
  const i64 t_last = (t0 + FORGE_FA_ROWS < T ? t0 + FORGE_FA_ROWS : T) - 1;
  const i64 n_keys = pos + t_last + 1;  // keys the tile's last query sees

  // The scaled queries (rows past T: zeros, never written out).
  const float* q_base = qkv + b * T * 3 * C + h * hd;
  forge_fa_load_tile(q_s, ld, q_base, 3 * C, t0, T, hd, scale, ((u64)q_base & 15) == 0);
  const bool kv_vec4 = ((u64)k_base & 15) == 0 && ((u64)v_base & 15) == 0 && kv_stride % 4 == 0;

  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int n_dk = (int)(hd >> 4);
  float m[4], l[4], o[4][FORGE_FA_MAX_DK];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = forge_neg_inf();
    l[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < FORGE_FA_MAX_DK; ++k) o[i][k] = 0.0f;
  }

  for (i64 s0 = 0; s0 < n_keys; s0 += FORGE_FA_ROWS) {
    __syncthreads();  // the previous tile's readers are done (and q_s is written)
    forge_fa_load_tile(k_s, ld, k_base, kv_stride, s0, n_keys, hd, 1.0f, kv_vec4);
    forge_fa_load_tile(v_s, ld, v_base, kv_stride, s0, n_keys, hd, 1.0f, kv_vec4);
    __syncthreads();

    // Scores of rows ty + 16 i against keys tx + 16 j.
    float sc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) sc[i][j] = 0.0f;
    for (i64 d = 0; d < hd; ++d) {
      float qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = q_s[(ty + 16 * i) * ld + d];
#pragma unroll
      for (int j = 0; j < 4; ++j) kv[j] = k_s[(tx + 16 * j) * ld + d];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) sc[i][j] += qv[i] * kv[j];
    }

    // Causal mask, then the running max and sum of each row.
    float corr[4];
    forge_fa_online_softmax(sc, m, l, corr, p_s, 65, ty, tx, t0, s0, T, pos);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int k = 0; k < FORGE_FA_MAX_DK; ++k) o[i][k] *= corr[i];
    __syncthreads();

    // O += P V over the tile's keys.
    for (int c = 0; c < FORGE_FA_ROWS; ++c) {
      float pv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) pv[i] = p_s[(ty + 16 * i) * 65 + c];
#pragma unroll
      for (int k = 0; k < FORGE_FA_MAX_DK; ++k) {
        if (k < n_dk) {
          const float vv = v_s[c * ld + tx + 16 * k];
#pragma unroll
          for (int i = 0; i < 4; ++i) o[i][k] += pv[i] * vv;
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 t = t0 + ty + 16 * i;
    if (t >= T) continue;
    const float inv = 1.0f / l[i];
    float* y = out + (b * T + t) * C + h * hd;
#pragma unroll
    for (int k = 0; k < FORGE_FA_MAX_DK; ++k)
      if (k < n_dk) y[tx + 16 * k] = o[i][k] * inv;
  }
}
