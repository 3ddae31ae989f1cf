// Kernels for weights stored in f16, bf16, q8_0 and q4_0 (forge/dtype.h: ggml's blocks of
// 32, an f16 scale d then 32 int8 q (34 bytes) or 16 bytes of nibbles (18 bytes), element j
// in byte j % 16, low nibble for j < 16). `dtype` codes: 0 f16, 1 bf16, 2 q8_0, 3 q4_0.
// As the CPU (src/backend/cpu/weight_kernels.cpp, quant_portable.cpp):
//   forge_widen16           f16/bf16 [n] -> f32, exactly (then cuBLASLt multiplies in f32)
//   forge_embedding_w       rows of such a table, widened / dequantized to f32
//   forge_gemv_w16          out = epilogue(a @ w^T) for a few rows, w [N, K] f16/bf16
//   forge_gemv_w16x         the same for contiguous rows, K % 8 == 0: 16-byte weight reads,
//                           and the fused layernorm and residual of decode's seams
//   forge_quantize_rows_q8  op(a)'s rows rounded to int8 blocks (d = max|x| / 127)
//   forge_matmul_q          out = epilogue(sum over blocks (dw * da) * integer dot)
// Block scales and weight blocks start at even bytes (row bytes and offsets are whole
// blocks), so they are read as 16-bit words.

static __device__ __forceinline__ float forge_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

static __device__ __forceinline__ float forge_widen(unsigned short h, int bf16) {
  return bf16 ? __uint_as_float(((u32)h) << 16) : forge_f16_to_f32(h);
}

// a (4 signed bytes) . b (4 signed / unsigned bytes) + c.
static __device__ __forceinline__ int forge_dp4a_ss(int a, int b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
static __device__ __forceinline__ int forge_dp4a_su(int a, u32 b, int c) {
  int d;
  asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// out = [accumulate +] [gelu](alpha * acc [+ bias]): matmul's epilogue, as the CPU's.
static __device__ __forceinline__ void forge_w_epilogue(float acc, const float* bias, float* out,
                                                        i64 n, float alpha, int flags) {
  float v = alpha * acc;
  if (flags & 1) v += bias[n];
  if (flags & 2) v = forge_gelu_f(v);
  if (flags & 4) v += *out;
  *out = v;
}

// w: [n] 16-bit; out: [n] f32.
extern "C" __global__ void forge_widen16(const unsigned short* w, float* out, i64 n, int bf16) {
  FORGE_GRID_STRIDE(i, n) out[i] = forge_widen(w[i], bf16);
}

// ids: [n] u32; table: [V, C] of `dtype` (row_bytes each); out: [n, C] f32. One block of 256
// per id; an id >= V leaves its row unwritten (as forge_embedding).
extern "C" __global__ void forge_embedding_w(const u32* ids, const unsigned char* table, float* out,
                                             i64 n, i64 V, i64 C, i64 row_bytes, int dtype) {
  const i64 i = blockIdx.x;
  if (i >= n) return;
  const i64 id = ids[i];
  if (id >= V) return;
  const unsigned char* row = table + id * row_bytes;
  float* dst = out + i * C;
  for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
    float v;
    if (dtype <= 1) {
      v = forge_widen(((const unsigned short*)row)[c], dtype);
    } else {
      const i64 b = c / 32, j = c % 32;
      const unsigned char* blk = row + b * (dtype == 2 ? 34 : 18);
      const float d = forge_f16_to_f32(*(const unsigned short*)blk);
      int q;
      if (dtype == 2) {
        q = (int)(signed char)blk[2 + j];
      } else {
        const unsigned char byte = blk[2 + (j % 16)];
        q = (int)(j < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
      }
      v = d * (float)q;
    }
    dst[c] = v;
  }
}

// Rows of a: row r of op(a) (r = bb * M + m) at a + bb * sb + m * sm, element k at + k * sk
// (trans_a: sm = 1, sk = M). w: [N, K] 16-bit. out: [rows, N]. Up to 4 rows per warp, one
// column n per warp (8 per block of 256): grid (ceil(N / 8), ceil(rows / 4)), y looping.
// flags: 1 bias, 2 gelu, 4 accumulate.
extern "C" __global__ void forge_gemv_w16(const float* a, const unsigned short* w,
                                          const float* bias, float* out, i64 rows, i64 M, i64 N,
                                          i64 K, i64 sb, i64 sm, i64 sk, float alpha, int flags,
                                          int bf16) {
  const i64 n = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;  // a whole warp: no shuffle is left waiting
  const unsigned short* wn = w + n * K;
  for (i64 r0 = blockIdx.y * 4; r0 < rows; r0 += (i64)gridDim.y * 4) {
    const int nr = rows - r0 < 4 ? (int)(rows - r0) : 4;
    const float* ar[4];
    for (int r = 0; r < 4; ++r) {
      const i64 row = r0 + (r < nr ? r : 0);
      ar[r] = a + (row / M) * sb + (row % M) * sm;
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (i64 k = lane; k < K; k += 32) {
      const float wv = forge_widen(wn[k], bf16);
      for (int r = 0; r < 4; ++r)
        if (r < nr) acc[r] = fmaf(ar[r][k * sk], wv, acc[r]);
    }
    for (int r = 0; r < 4; ++r) {
      const float s = forge_warp_sum(acc[r]);
      if (lane == 0 && r < nr) forge_w_epilogue(s, bias, out + (r0 + r) * N + n, n, alpha, flags);
    }
  }
}

// Decode's 16-bit products (the fast path of forge_gemv_w16): x [M, K] contiguous rows,
// M <= 8; w [N, K] f16/bf16, 16-byte aligned, K % 8 == 0. Block 256 = 8 warps, one output
// column per warp, grid ceil(N / 8); the rows of x' are staged in dynamic shared memory
// (M * K floats; with gamma, each row's layernorm, as forge_gemv_nn's fused one), then lane l
// reads 8 weights (16 bytes) at k = 8 (l + 32 i), four such reads in flight, and a butterfly
// sums the lanes. Epilogue, res and accumulate as forge_gemv_nn's.
extern "C" __global__ void __launch_bounds__(256)
    forge_gemv_w16x(const float* x, const unsigned short* w, const float* bias, float* out, i64 M,
                    i64 K, i64 N, float alpha, int gelu, int accumulate, const float* res,
                    const float* gamma, const float* beta, float eps, int bf16) {
  extern __shared__ float forge_w16_xs[];                                 // [M][K]
  if (M > FORGE_GEMV_MAX_M || blockDim.x != 256 || (K & 7) != 0) return;  // refused by the host
  {  // launched early: the block's 8 weight rows go to L2 (128-byte lines) meanwhile
    const i64 n0 = blockIdx.x * 8, rows = N - n0 < 8 ? N - n0 : 8;
    const i64 lines = (K * 2 + 127) / 128;
    for (i64 i = threadIdx.x; i < rows * lines; i += blockDim.x)
      forge_prefetch_l2(reinterpret_cast<const char*>(w + (n0 + i / lines) * K) +
                        128 * (i % lines));
  }
  forge_let_next_start();
  forge_wait_for_previous();
  forge_stage_rows(x, M, K, gamma, beta, eps, forge_w16_xs);
  const int lane = threadIdx.x & 31;
  const i64 n = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (n >= N) return;  // a whole warp, after the block's last barrier
  const uint4* wr = reinterpret_cast<const uint4*>(w + n * K);
  const i64 K8 = K >> 3;
  float acc[FORGE_GEMV_MAX_M];
#pragma unroll
  for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) acc[m] = 0.0f;
  for (i64 i0 = lane; i0 < K8; i0 += 4 * 32) {
    uint4 q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const i64 i = i0 + 32 * u;
      if (i < K8) q[u] = wr[i];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const i64 i = i0 + 32 * u;
      if (i >= K8) break;
      const u32 words[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
      float wv[8];
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // little-endian: element 2e is the low half of word e
        wv[2 * e] = forge_widen((unsigned short)(words[e] & 0xffffu), bf16);
        wv[2 * e + 1] = forge_widen((unsigned short)(words[e] >> 16), bf16);
      }
#pragma unroll
      for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) {
        if (m < M) {
          const float4* xm = reinterpret_cast<const float4*>(forge_w16_xs + m * K + 8 * i);
          const float4 a0 = xm[0], a1 = xm[1];
          acc[m] += a0.x * wv[0];
          acc[m] += a0.y * wv[1];
          acc[m] += a0.z * wv[2];
          acc[m] += a0.w * wv[3];
          acc[m] += a1.x * wv[4];
          acc[m] += a1.y * wv[5];
          acc[m] += a1.z * wv[6];
          acc[m] += a1.w * wv[7];
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) {
    if (m < M) {
      const float s = forge_warp_sum(acc[m]);
      if (lane == 0) {
        float* o_at = out + m * N + n;
        const float* r_at = res != nullptr ? res + m * N + n : nullptr;
        *o_at = forge_gemv_epilogue(s, alpha, bias, n, gelu, r_at, accumulate, o_at);
      }
    }
  }
}

// op(a)'s rows (addressed as in forge_gemv_w16) -> qa [rows, K] int8 and da [rows, K / 32]:
// per block of 32, d = max|x| / 127, q = x * (1 / d) rounded half to even, clamped to
// [-127, 127] (NaN -> -127), as quantize_portable. One warp per block, grid-stride.
extern "C" __global__ void forge_quantize_rows_q8(const float* a, signed char* qa, float* da,
                                                  i64 rows, i64 M, i64 K, i64 sb, i64 sm, i64 sk) {
  const i64 KB = K / 32;
  const i64 total = rows * KB;
  const int lane = threadIdx.x % 32;
  const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
  for (i64 g = blockIdx.x * (i64)(blockDim.x / 32) + threadIdx.x / 32; g < total; g += warps) {
    const i64 row = g / KB, kb = g % KB;
    const float x = a[(row / M) * sb + (row % M) * sm + (kb * 32 + lane) * sk];
    const float amax = forge_warp_max(fabsf(x));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    float v = rintf(x * id);
    if (!(v >= -127.0f)) v = -127.0f;
    if (v > 127.0f) v = 127.0f;
    qa[row * K + kb * 32 + lane] = (signed char)(int)v;
    if (lane == 0) da[row * KB + kb] = d;
  }
}

// out[r, n] = epilogue(sum over blocks b of (dw * da[r, b]) * (qa[r, b] . qw[n, b])).
// qa: [rows, K] int8 (4-byte aligned blocks); da: [rows, K / 32]; w: [N, K] in q8_0 (dtype 2)
// or q4_0 (3), row_bytes each. Grid and flags as forge_gemv_w16; each lane takes whole
// blocks.
extern "C" __global__ void forge_matmul_q(const signed char* qa, const float* da,
                                          const unsigned char* w, const float* bias, float* out,
                                          i64 rows, i64 N, i64 K, i64 row_bytes, float alpha,
                                          int flags, int dtype) {
  const i64 n = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const i64 KB = K / 32;
  const i64 bb = dtype == 2 ? 34 : 18;
  const unsigned char* wn = w + n * row_bytes;
  for (i64 r0 = blockIdx.y * 4; r0 < rows; r0 += (i64)gridDim.y * 4) {
    const int nr = rows - r0 < 4 ? (int)(rows - r0) : 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (i64 b = lane; b < KB; b += 32) {
      const unsigned short* blk = (const unsigned short*)(wn + b * bb);
      const float dw = forge_f16_to_f32(blk[0]);
      u32 wq[8];  // q8_0: the 32 int8; q4_0: words 0-3 low nibbles, 4-7 high nibbles
      if (dtype == 2) {
        for (int j = 0; j < 8; ++j) wq[j] = (u32)blk[1 + 2 * j] | ((u32)blk[2 + 2 * j] << 16);
      } else {
        for (int j = 0; j < 4; ++j) {
          const u32 raw = (u32)blk[1 + 2 * j] | ((u32)blk[2 + 2 * j] << 16);
          wq[j] = raw & 0x0F0F0F0Fu;
          wq[4 + j] = (raw >> 4) & 0x0F0F0F0Fu;
        }
      }
      for (int r = 0; r < 4; ++r) {
        if (r >= nr) break;
        const int* q = (const int*)(qa + (r0 + r) * K + b * 32);
        int s = 0;
        if (dtype == 2) {
          for (int j = 0; j < 8; ++j) s = forge_dp4a_ss(q[j], (int)wq[j], s);
        } else {
          int qsum = 0;
          for (int j = 0; j < 8; ++j) {
            s = forge_dp4a_su(q[j], wq[j], s);
            qsum = forge_dp4a_ss(q[j], 0x01010101, qsum);
          }
          s -= 8 * qsum;  // the nibbles are stored + 8
        }
        acc[r] += dw * da[(r0 + r) * KB + b] * (float)s;
      }
    }
    for (int r = 0; r < 4; ++r) {
      const float s = forge_warp_sum(acc[r]);
      if (lane == 0 && r < nr) forge_w_epilogue(s, bias, out + (r0 + r) * N + n, n, alpha, flags);
    }
  }
}
