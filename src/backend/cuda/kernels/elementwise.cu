// Flat elementwise kernels: add (with row broadcast), GELU and its backward, scale, dropout,
// rounding to bf16.
// All but forge_round_bf16_rows (a block a row) are grid-stride loops over n elements: block
// 256, grid min(ceil(n / 256), 65536). Tensors are contiguous fp32 and are treated as flat
// arrays of n elements.

// a, out: [n]; b: [n] or [bn] (a row vector added to every row of a, bn = a's last dim).
// out may equal a (add_ in place): each element is read before it is written, by one thread.
extern "C" __global__ void forge_add(const float* a, const float* b, float* out, i64 n, i64 bn) {
  if (bn == n) {
    FORGE_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
  } else {
    FORGE_GRID_STRIDE(i, n) out[i] = a[i] + b[i % bn];
  }
}

// x, out: [n]; out = gelu(x), the tanh form (common.cuh).
extern "C" __global__ void forge_gelu(const float* x, float* out, i64 n) {
  FORGE_GRID_STRIDE(i, n) out[i] = forge_gelu_f(x[i]);
}

// x, dy, dx: [n]; dx = dy * gelu'(x).
extern "C" __global__ void forge_gelu_bwd(const float* x, const float* dy, float* dx, i64 n) {
  FORGE_GRID_STRIDE(i, n) dx[i] = dy[i] * forge_gelu_grad(x[i]);
}

// x, out: [n]; out = x * s (out may equal x).
extern "C" __global__ void forge_scale(const float* x, float* out, float s, i64 n) {
  FORGE_GRID_STRIDE(i, n) out[i] = x[i] * s;
}

// x, out: [n]. Element i is kept iff (dropout_hash(seed, index0 + i) >> 8) >= threshold, and
// then multiplied by scale = 1 / (1 - p) (formed on the host). The mask depends only on
// (seed, index0 + i), so it is bit-identical to the CPU's whatever the launch shape.
extern "C" __global__ void forge_dropout(const float* x, float* out, i64 n, u64 seed, u64 index0,
                                         u32 threshold, float scale) {
  FORGE_GRID_STRIDE(i, n) {
    const bool keep = (forge_dropout_hash(seed, index0 + (u64)i) >> 8) >= threshold;
    out[i] = keep ? x[i] * scale : 0.0f;
  }
}

// f -> bf16 bits, rounded to nearest, ties to even (as io/half.h does); NaN stays a quiet NaN.
static __device__ __forceinline__ u32 forge_bf16_bits(float f) {
  const u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// The operands of a product under precision bf16 (cuda_matmul.cpp), rounded to bf16 copies.
// x, out: [n]; n % 4 == 0 and x 16-byte aligned (the host checks): four values a thread.
extern "C" __global__ void forge_round_bf16(const float* x, unsigned int* out, i64 n) {
  FORGE_GRID_STRIDE(i, n / 4) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    out[2 * i] = forge_bf16_bits(v.x) | forge_bf16_bits(v.y) << 16;
    out[2 * i + 1] = forge_bf16_bits(v.z) | forge_bf16_bits(v.w) << 16;
  }
}

// x: [rows, cols]; out: [rows, ld], ld >= cols, the pad columns 0. A block a row at a time.
extern "C" __global__ void forge_round_bf16_rows(const float* x, unsigned short* out, i64 rows,
                                                 i64 cols, i64 ld) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x)
    for (i64 c = threadIdx.x; c < ld; c += blockDim.x)
      out[r * ld + c] = (unsigned short)(c < cols ? forge_bf16_bits(x[r * cols + c]) : 0u);
}

// Rows of x (row stride x_ld) into out (row stride out_ld): the fp32 operands and results of
// products whose rows are not 16-byte aligned, copied to and from padded rows
// (cuda_matmul.cpp). Columns past cols are left as they are. A block a row at a time.
extern "C" __global__ void forge_copy_rows(const float* x, i64 x_ld, float* out, i64 out_ld,
                                           i64 rows, i64 cols) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x)
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) out[r * out_ld + c] = x[r * x_ld + c];
}
