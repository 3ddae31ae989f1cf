// Shared definitions of forge's CUDA kernels: integer typedefs, block reductions, the dropout
// hash and the tanh GELU.
//
// How these sources are compiled: the host concatenates this file and then every
// kernels/*.cu file, in alphabetical order, into ONE translation unit and compiles it at run
// time with NVRTC (--std=c++17 --gpu-architecture=sm_XX -default-device). NVRTC gets no
// include path, so nothing here or in the .cu files may #include anything (not <cstdint>,
// not cuda_fp16.h): only CUDA built-ins (threadIdx, __syncthreads, __shfl_xor_sync, expf,
// the __f*_rn intrinsics, ...) are available, and constants such as -inf are spelled out.
// This file is not #included by the .cu files: they simply use what it defines, and every
// name must be unique across all files (file-local helpers are `static __device__`).
// There is no --use_fast_math: fp32 results must match the CPU backend within 1e-4, so the
// kernels use IEEE expf/logf/sqrtf and true division. Every reduction has a fixed shape for
// a given launch, so results are deterministic run to run (no float atomics anywhere).
// kernels/check_compile.sh compiles the same concatenation with nvcc, to PTX, as a check.

typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// ---------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------

static __device__ __forceinline__ float forge_neg_inf() { return __int_as_float((int)0xff800000u); }

// An index larger than any real one: the identity of the argmax reduction.
#define FORGE_NO_INDEX 0x7fffffffffffffffLL

// The grid-stride loop of the elementwise kernels: the host launches 256 threads per block
// and min(ceil(n / 256), 65536) blocks, so one thread may take several elements.
#define FORGE_GRID_STRIDE(i, n)                                     \
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (n); \
       i += (i64)gridDim.x * blockDim.x)

// ---------------------------------------------------------------------------------------
// Early launch (programmatic dependent launch, sm_90 and newer; Kernels::launch_early)
//
// A kernel launched early may start while the kernel queued before it still runs. Before
// forge_wait_for_previous() it may only prefetch into L2 (forge_prefetch_l2: L2 is where
// every write lands, so a line fetched early is never stale), or read memory that no kernel
// queued with it writes (forge_gemv_nn's weights, launched early only into a decode step's
// graph); after it, everything the kernels before it wrote is visible. forge_let_next_start() lets the kernel queued after
// this one be scheduled (it then waits in its own forge_wait_for_previous). All three are
// no-ops on older GPUs, and the wait returns at once after an ordinary launch.
// ---------------------------------------------------------------------------------------

static __device__ __forceinline__ void forge_wait_for_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void forge_let_next_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

static __device__ __forceinline__ void forge_prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// ---------------------------------------------------------------------------------------
// Warp and block reductions
//
// The block helpers work for any blockDim.x that is a multiple of 32, up to 1024 (forge
// launches 256). Every thread of the block must call them (they
// contain __syncthreads) and every thread gets the same, bit-identical result: the
// xor-butterfly gives all lanes the same value (a + b == b + a exactly in IEEE), and after
// the per-warp partials are exchanged through shared memory each warp reduces the same
// partials in the same order, so no broadcast step is needed. The leading __syncthreads
// lets a kernel call the same helper several times (the shared slots are reused).
// ---------------------------------------------------------------------------------------

static __device__ __forceinline__ float forge_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ double forge_warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ float forge_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

static __device__ __forceinline__ float forge_block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = forge_warp_sum(v);
  __syncthreads();  // an earlier call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return forge_warp_sum(lane < n_warps ? partial[lane] : 0.0f);
}

static __device__ __forceinline__ double forge_block_sum_d(double v) {
  __shared__ double partial_d[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = forge_warp_sum_d(v);
  __syncthreads();
  if (lane == 0) partial_d[warp] = v;
  __syncthreads();
  return forge_warp_sum_d(lane < n_warps ? partial_d[lane] : 0.0);
}

// LayerNorm's mean and rstd of one row of C floats (layernorm.cu, and the fused
// layernorm_matmul of gemv.cu); every thread of the block gets both. Two passes (no
// E[x^2] - mean^2 cancellation), biased variance, rstd = 1 / sqrt(var + eps).
static __device__ __forceinline__ void forge_ln_row_stats(const float* xr, i64 C, float eps,
                                                          float& mean, float& rstd) {
  float s = 0.0f;
  for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  mean = forge_block_sum(s) / (float)C;
  float q = 0.0f;
  for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = xr[c] - mean;
    q += d * d;
  }
  const float var = forge_block_sum(q) / (float)C;
  rstd = 1.0f / sqrtf(var + eps);
}

// The M rows of x [M, K] into dst [M, K] (shared memory), or with gamma their layernorm
// (x - mean) * rstd * gamma + beta, as forge_layernorm computes it; then a barrier. The
// few-row products' staging (gemv.cu, weights.cu). Every thread of the block calls it.
static __device__ __forceinline__ void forge_stage_rows(const float* x, i64 M, i64 K,
                                                        const float* gamma, const float* beta,
                                                        float eps, float* dst) {
  for (i64 m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    float* sr = dst + m * K;
    if (gamma != nullptr) {
      float mean, rstd;
      forge_ln_row_stats(xr, K, eps, mean, rstd);
      for (i64 k = threadIdx.x; k < K; k += blockDim.x)
        sr[k] = (xr[k] - mean) * rstd * gamma[k] + beta[k];
    } else {
      for (i64 k = threadIdx.x; k < K; k += blockDim.x) sr[k] = xr[k];
    }
  }
  __syncthreads();
}

// Max of the block's values; fmaxf ignores a NaN operand, -inf is the identity.
static __device__ __forceinline__ float forge_block_max(float v) {
  __shared__ float partial_m[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = forge_warp_max(v);
  __syncthreads();
  if (lane == 0) partial_m[warp] = v;
  __syncthreads();
  return forge_warp_max(lane < n_warps ? partial_m[lane] : forge_neg_inf());
}

// Argmax pairs: (value, index), NaN already replaced by -inf by the caller. b beats a if its
// value is greater, or equal with a smaller index: a total order, so the reduction's result
// does not depend on its shape and is the first of equal maxima.
static __device__ __forceinline__ void forge_argmax_merge(float& v, i64& i, float ov, i64 oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

static __device__ __forceinline__ void forge_warp_argmax(float& v, i64& i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const i64 oi = __shfl_xor_sync(0xffffffffu, i, o);
    forge_argmax_merge(v, i, ov, oi);
  }
}

// On return every thread holds the block's winning (v, i).
static __device__ __forceinline__ void forge_block_argmax(float& v, i64& i) {
  __shared__ float partial_v[32];
  __shared__ i64 partial_i[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  forge_warp_argmax(v, i);
  __syncthreads();
  if (lane == 0) {
    partial_v[warp] = v;
    partial_i[warp] = i;
  }
  __syncthreads();
  v = lane < n_warps ? partial_v[lane] : forge_neg_inf();
  i = lane < n_warps ? partial_i[lane] : FORGE_NO_INDEX;
  forge_warp_argmax(v, i);
}

// ---------------------------------------------------------------------------------------
// Dropout hash: hash_mix32 and dropout_hash of include/forge/ops.h, operation for operation
// (32-bit unsigned arithmetic wraps identically on host and device).
// ---------------------------------------------------------------------------------------

static __device__ __forceinline__ u32 forge_hash_mix32(u32 x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

static __device__ __forceinline__ u32 forge_dropout_hash(u64 seed, u64 index) {
  const u32 h = forge_hash_mix32((u32)index ^ (u32)seed);
  return forge_hash_mix32(h ^ (u32)(seed >> 32) ^ ((u32)(index >> 32) * 0x9E3779B9U));
}

// ---------------------------------------------------------------------------------------
// GELU, tanh approximation, in the CPU's form (src/backend/cpu/span_loops.h):
//   0.5 (1 + tanh(u)) = 1 / (1 + e),  e = exp(-2u),  u = k0 x (1 + k1 x^2)
//   gelu(x) = x / (1 + e);  gelu'(x) = s + 2 x s (e s) u',  s = 1 / (1 + e),
//   u' = k0 (1 + 3 k1 x^2).
// -2u is clamped to [-88, 88] as the CPU does, so that 1 + e and e * s stay finite (an
// infinite e would make e * s = inf * 0 = NaN in the derivative).
// ---------------------------------------------------------------------------------------

#define FORGE_GELU_K0 0.7978845608028654f  // sqrt(2 / pi)
#define FORGE_GELU_K1 0.044715f

static __device__ __forceinline__ float forge_gelu_e(float x) {
  const float u = FORGE_GELU_K0 * x * (1.0f + FORGE_GELU_K1 * x * x);
  const float t = fminf(fmaxf(-2.0f * u, -88.0f), 88.0f);
  return expf(t);
}

static __device__ __forceinline__ float forge_gelu_f(float x) {
  return x / (1.0f + forge_gelu_e(x));
}

// gelu'(x), to be multiplied by dy.
static __device__ __forceinline__ float forge_gelu_grad(float x) {
  const float e = forge_gelu_e(x);
  const float s = 1.0f / (1.0f + e);
  const float du = FORGE_GELU_K0 * (1.0f + 3.0f * FORGE_GELU_K1 * x * x);
  return s + 2.0f * x * s * (e * s) * du;
}
