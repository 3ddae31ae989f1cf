// Products with few rows (M <= 8: a decode step's rows) on the CUDA cores, where cuBLASLt's
// GEMM tiles leave most of the GPU idle: each weight is read once, by one thread, for all
// M rows. Exact fp32 arithmetic (also when products otherwise run in TF32).
//
//   out[m, n] = epi(alpha * sum_k x'[m, k] w(k, n) + bias[n]) (+ res[m, n]) (+ out[m, n])
//   epi: the tanh GELU when gelu != 0, else the identity (GELU before the accumulation, as
//   out += gelu(...) means); res: a residual row block added last (x_new = x + a @ w + b of
//   matmul_add_layernorm_matmul, without copying x first), or null; the accumulate flag adds
//   out's old value the same way.
//   x' = x, or layernorm(x, gamma, beta, eps) row by row when gamma is not null (forge_gemv_nn
//   only: the fused layernorm_matmul, which saves a launch and the normalized rows' round
//   trip through memory). The normalized rows are computed as forge_layernorm computes them
//   (the same block reductions over 256 threads), so the fused product gives the bits of
//   layernorm followed by the product.
// x: [M, K] row-major (row stride K); out, res: [M, N] (row stride N); bias: [N] or null.
// Both kernels sum in a fixed order for a given shape: the same bits on every run.

#define FORGE_GEMV_MAX_M 8

static __device__ __forceinline__ float forge_gemv_epilogue(float acc, float alpha,
                                                            const float* bias, i64 col, int gelu,
                                                            const float* res_at, int accumulate,
                                                            const float* out_at) {
  float v = alpha * acc;
  if (bias != nullptr) v += bias[col];
  if (gelu) v = forge_gelu_f(v);
  if (res_at != nullptr) v += *res_at;
  if (accumulate) v += *out_at;
  return v;
}

// w(k, n) = w[k * N + n] (weights stored [in, out], GPT-2's Conv1D). N % 4 == 0 and w
// 16-byte aligned (the host checks). Block: 256 threads = 2 column quads x 128 row groups,
// 8 columns per block (each row's 8 columns are one 32-byte sector), grid ceil(N / 8): 96
// blocks already for N = 768. Thread (g, q) sums rows g, g + 128, ... of its four columns
// (float4 reads, up to 8 in flight); then P lanes per output sum the 128 groups' partials in a
// fixed order (P = 32 for one row, 4 for eight).
// Dynamic shared memory: max(32 KiB, staged ? M * K * 4 bytes : 0), at most 40 KiB. With
// `staged` the M rows of x' are first copied (or normalized) into it and read from there; the
// same memory then holds the 128 groups' partials. Without it x is read from global memory
// (rows too long to stage).
#define FORGE_GEMV_COLS 8
#define FORGE_GEMV_GROUPS 128

extern "C" __global__ void forge_gemv_nn(const float* x, const float* w, const float* bias,
                                         float* out, i64 M, i64 K, i64 N, float alpha, int gelu,
                                         int accumulate, const float* res, const float* gamma,
                                         const float* beta, float eps, int staged) {
  extern __shared__ float forge_gemv_smem[];
  // part[g][m][c]: the 128 groups' partial sums (after the rows' loop)
  float(*part)[FORGE_GEMV_MAX_M][FORGE_GEMV_COLS] =
      reinterpret_cast<float(*)[FORGE_GEMV_MAX_M][FORGE_GEMV_COLS]>(forge_gemv_smem);
  // Refused by the host: too many rows, another block size, a layernorm without staging.
  if (M > FORGE_GEMV_MAX_M || blockDim.x != 256 || (gamma != nullptr && !staged)) return;
  const int quad = threadIdx.x & 1, g = threadIdx.x >> 1;
  const i64 c0 = blockIdx.x * (i64)FORGE_GEMV_COLS + quad * 4;
  // Rows in batches of 8: all 8 reads are issued before the first is used (a loop unrolled
  // by the compiler would run K = 768's 6 rows a thread one at a time). The first batch (all
  // of a thread's rows for K <= 1024) is read before the wait and the staging: its latency
  // then overlaps theirs and, launched early, the kernel before. The host launches it early
  // only into a decode step's graph, where no kernel writes the weights; otherwise it starts
  // after the kernel before has ended, and any order of its reads is safe.
  float4 wv[8];
  auto load_rows = [&](i64 k0) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const i64 k = k0 + u * FORGE_GEMV_GROUPS;
      if (c0 < N && k < K) wv[u] = *reinterpret_cast<const float4*>(w + k * N + c0);
    }
  };
  load_rows(g);
  forge_let_next_start();
  forge_wait_for_previous();
  const float* xs = x;
  if (staged) {
    forge_stage_rows(x, M, K, gamma, beta, eps, forge_gemv_smem);
    xs = forge_gemv_smem;
  }
  float acc[FORGE_GEMV_MAX_M][4];
#pragma unroll
  for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;
  if (c0 < N) {
    for (i64 k0 = g; k0 < K; k0 += 8 * FORGE_GEMV_GROUPS) {
      if (k0 != g) load_rows(k0);
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const i64 k = k0 + u * FORGE_GEMV_GROUPS;
        if (k >= K) break;
#pragma unroll
        for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) {
          if (m < M) {
            const float xv = xs[m * K + k];
            acc[m][0] += xv * wv[u].x;
            acc[m][1] += xv * wv[u].y;
            acc[m][2] += xv * wv[u].z;
            acc[m][3] += xv * wv[u].w;
          }
        }
      }
    }
  }
  if (staged) __syncthreads();  // every thread is done with the staged rows
#pragma unroll
  for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) {
    if (m < M) {
#pragma unroll
      for (int i = 0; i < 4; ++i) part[g][m][quad * 4 + i] = acc[m][i];
    }
  }
  __syncthreads();
  // Output o = (m, c) of the block's 8 M: lanes o * P .. o * P + P - 1 each sum every P-th
  // group, then a butterfly over those P lanes (an aligned part of one warp). Every thread
  // takes part in the shuffles; those past the outputs only discard their sums.
  const int n_out = FORGE_GEMV_COLS * (int)M;
  int P = 32;
  while (P * n_out > 256) P >>= 1;
  const int o = threadIdx.x / P, sub = threadIdx.x % P;
  const int m = o / FORGE_GEMV_COLS, c = o % FORGE_GEMV_COLS;
  float s = 0.0f;
  if (o < n_out)
    for (int r = sub; r < FORGE_GEMV_GROUPS; r += P) s += part[r][m][c];
  for (int off = P >> 1; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  const i64 col = blockIdx.x * (i64)FORGE_GEMV_COLS + c;
  if (o < n_out && sub == 0 && col < N) {
    float* o_at = out + m * N + col;
    const float* r_at = res != nullptr ? res + m * N + col : nullptr;
    *o_at = forge_gemv_epilogue(s, alpha, bias, col, gelu, r_at, accumulate, o_at);
  }
}

// w(k, n) = w[n * K + k] (weights stored [out, in]: the tied LM head's wte). K % 4 == 0 and
// w 16-byte aligned (the host checks). Block: 256 threads = 8 warps, one output column per
// warp, grid ceil(N / 8); lane l reads the float4s l, l + 32, ... of the weight row, and a
// butterfly sums the lanes.
extern "C" __global__ void forge_gemv_nt(const float* x, const float* w, const float* bias,
                                         float* out, i64 M, i64 K, i64 N, float alpha, int gelu,
                                         int accumulate) {
  if (M > FORGE_GEMV_MAX_M) return;  // refused by the host
  forge_wait_for_previous();
  const int lane = threadIdx.x & 31;
  const i64 col = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (col >= N) return;  // uniform over the warp
  const float* row = w + col * K;
  float acc[FORGE_GEMV_MAX_M];
#pragma unroll
  for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) acc[m] = 0.0f;
  for (i64 k = 4 * (i64)lane; k < K; k += 128) {
    const float4 wv = *reinterpret_cast<const float4*>(row + k);
#pragma unroll
    for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) {
      if (m < M) {
        const float* xm = x + m * K + k;
        acc[m] += xm[0] * wv.x;
        acc[m] += xm[1] * wv.y;
        acc[m] += xm[2] * wv.z;
        acc[m] += xm[3] * wv.w;
      }
    }
  }
#pragma unroll
  for (int m = 0; m < FORGE_GEMV_MAX_M; ++m) {
    if (m < M) {
      const float s = forge_warp_sum(acc[m]);
      if (lane == 0) {
        float* o_at = out + m * N + col;
        *o_at = forge_gemv_epilogue(s, alpha, bias, col, gelu, nullptr, accumulate, o_at);
      }
    }
  }
}
