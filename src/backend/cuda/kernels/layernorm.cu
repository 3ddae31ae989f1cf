// LayerNorm over the last dimension C, forward and backward.
//   forge_layernorm, forge_layernorm_bwd_dx: one block of 256 per row (grid.x = rows).
//   forge_layernorm_bwd_params_partial: grid (ceil(C / 256), chunks), one thread per column
//   and chunk of rows; the host then adds the chunks with forge_sum_chunks (reduce.cu).
// Mean and variance are two passes over the row (no E[x^2] - mean^2 cancellation), biased
// variance, rstd = 1 / sqrt(var + eps): the CPU's row_mean_rstd (span_loops.h); common.cuh's
// forge_ln_row_stats.

// x, out: [rows, C]; gamma, beta: [C]. out = (x - mean) * rstd * gamma + beta.
extern "C" __global__ void forge_layernorm(const float* x, const float* gamma, const float* beta,
                                           float* out, i64 rows, i64 C, float eps) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * C;
  float* yr = out + r * C;
  float mean, rstd;
  forge_ln_row_stats(xr, C, eps, mean, rstd);
  for (i64 c = threadIdx.x; c < C; c += blockDim.x)
    yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
}

// x, dy, dx: [rows, C]; gamma: [C]; stats: [rows, 2] = (mean, rstd) per row, saved for
// forge_layernorm_bwd_params_partial. As the CPU's layernorm_bwd_row_loop, with
// g = dy * gamma and xhat = (x - mean) * rstd:
//   mean_g = sum(g) / C;  mean_gx = (sum(g * (x - mean)) * rstd) / C
//   dx = rstd * (g - mean_g - xhat * mean_gx)
extern "C" __global__ void forge_layernorm_bwd_dx(const float* x, const float* gamma,
                                                  const float* dy, float* dx, float* stats,
                                                  i64 rows, i64 C, float eps) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * C;
  const float* dyr = dy + r * C;
  float* dxr = dx + r * C;
  float mean, rstd;
  forge_ln_row_stats(xr, C, eps, mean, rstd);
  float sg = 0.0f, sgx = 0.0f;
  for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = dyr[c] * gamma[c];
    sg += g;
    sgx += g * (xr[c] - mean);
  }
  const float mean_g = forge_block_sum(sg) / (float)C;
  const float mean_gx = (forge_block_sum(sgx) * rstd) / (float)C;
  for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (xr[c] - mean) * rstd;
    dxr[c] = rstd * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
  }
  if (threadIdx.x == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

// x, dy: [rows, C]; stats: [rows, 2]; pg, pb: [chunks, C] partial dgamma / dbeta.
// Chunk k = blockIdx.y covers rows [k * rows_per_chunk, min(rows, (k + 1) * rows_per_chunk)),
// summed in row order in float, as the CPU sums its fixed chunks of rows (the CPU then adds
// the chunks in double, as forge_sum_chunks does). Adjacent threads read adjacent columns.
extern "C" __global__ void forge_layernorm_bwd_params_partial(const float* x, const float* dy,
                                                              const float* stats, float* pg,
                                                              float* pb, i64 rows, i64 C,
                                                              i64 rows_per_chunk) {
  const i64 c = blockIdx.x * (i64)blockDim.x + threadIdx.x;
  if (c >= C) return;
  const i64 k = blockIdx.y;
  const i64 r0 = k * rows_per_chunk;
  const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float sg = 0.0f, sb = 0.0f;
  for (i64 r = r0; r < r1; ++r) {
    const float d = dy[r * C + c];
    const float xhat = (x[r * C + c] - stats[2 * r]) * stats[2 * r + 1];
    sg += d * xhat;
    sb += d;
  }
  pg[k * C + c] = sg;
  pb[k * C + c] = sb;
}
