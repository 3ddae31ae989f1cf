// Deterministic column and whole-tensor reductions, with no atomics: every output is summed
// by one thread, or by one block of fixed shape, in a fixed order.
//   forge_sum_rows_partial: x [rows, C] -> partial [chunks, C], grid (ceil(C / 256), chunks)
//   forge_sum_chunks: partial [chunks, C] -> out [C], grid ceil(C / 256)
//   forge_sumsq_partial: x [n] -> partial [ceil(n / chunk)] (double), grid ceil(n / chunk)
//   forge_sumsq_final: partial [count] (double) -> out [1], one block
// Blocks of 256 threads.

// partial[k, c] = sum of x[r, c] over chunk k's rows [k * rows_per_chunk, ...), in row order.
// Accumulated in double (the CPU's sum_rows sums every column in double) and rounded once.
extern "C" __global__ void forge_sum_rows_partial(const float* x, float* partial, i64 rows, i64 C,
                                                  i64 rows_per_chunk) {
  const i64 c = blockIdx.x * (i64)blockDim.x + threadIdx.x;
  if (c >= C) return;
  const i64 k = blockIdx.y;
  const i64 r0 = k * rows_per_chunk;
  const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  double s = 0.0;
  for (i64 r = r0; r < r1; ++r) s += (double)x[r * C + c];
  partial[k * C + c] = (float)s;
}

// out[c] = sum over k = 0..chunks-1, in order, of partial[k, c]; accumulated in double, as
// the CPU adds its layernorm_bwd chunks.
extern "C" __global__ void forge_sum_chunks(const float* partial, float* out, i64 chunks, i64 C) {
  const i64 c = blockIdx.x * (i64)blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0.0;
  for (i64 k = 0; k < chunks; ++k) s += (double)partial[k * C + c];
  out[c] = (float)s;
}

// partial[k] = sum of x[i]^2 (in double) over i in [k * chunk, min(n, (k + 1) * chunk)).
// Each thread strides over the chunk, then the block reduces in its fixed shape.
extern "C" __global__ void forge_sumsq_partial(const float* x, double* partial, i64 n,
                                               i64 chunk) {
  const i64 i0 = blockIdx.x * chunk;
  const i64 i1 = i0 + chunk < n ? i0 + chunk : n;
  double s = 0.0;
  for (i64 i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const double v = (double)x[i];
    s += v * v;
  }
  s = forge_block_sum_d(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = (float) sum of partial[0, count), one block: thread j sums j, j + 256, ... in
// order, then the block reduction; the same order on every run.
extern "C" __global__ void forge_sumsq_final(const double* partial, float* out, i64 count) {
  double s = 0.0;
  for (i64 i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = forge_block_sum_d(s);
  if (threadIdx.x == 0) out[0] = (float)s;
}
