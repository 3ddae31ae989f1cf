// Row kernels: softmax (optionally causal), softmax backward, argmax of each row.
// One block of 256 threads per row (grid.x = rows); the threads stride over the row's
// columns and combine with the block reductions of common.cuh.

// x, out: [rows, cols]. With causal, x is [..., T, cols] and row r (index i = r % T along
// dim -2) sees columns j <= i + offset (offset >= 0): the first n columns, n >= 1. Entries
// at and beyond n are written as exact zeros (softmax_bwd relies on it). Like the CPU, the
// exponentials are stored first and then multiplied by 1 / sum.
extern "C" __global__ void forge_softmax(const float* x, float* out, i64 rows, i64 cols, i64 T,
                                         int causal, i64 offset) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;  // uniform over the block: no thread is left at a barrier
  const float* xr = x + r * cols;
  float* yr = out + r * cols;
  i64 n = cols;
  if (causal) {
    const i64 i = r % T;
    if (offset < cols - i) n = i + offset + 1;  // written so that it cannot overflow
  }
  float mx = forge_neg_inf();
  for (i64 j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, xr[j]);
  mx = forge_block_max(mx);
  float sum = 0.0f;
  for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = expf(xr[j] - mx);
    yr[j] = e;  // read back below by this same thread: no barrier needed
    sum += e;
  }
  const float k = 1.0f / forge_block_sum(sum);
  for (i64 j = threadIdx.x; j < n; j += blockDim.x) yr[j] *= k;
  for (i64 j = n + threadIdx.x; j < cols; j += blockDim.x) yr[j] = 0.0f;
}

// y, dy, dx: [rows, cols]; dx = y * (dy - sum_row(y * dy)). Masked entries of a causal
// softmax are zeros in y, so they need no flag here.
extern "C" __global__ void forge_softmax_bwd(const float* y, const float* dy, float* dx, i64 rows,
                                             i64 cols) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;
  const float* yr = y + r * cols;
  const float* dyr = dy + r * cols;
  float* dxr = dx + r * cols;
  float dot = 0.0f;
  for (i64 j = threadIdx.x; j < cols; j += blockDim.x) dot += yr[j] * dyr[j];
  dot = forge_block_sum(dot);
  for (i64 j = threadIdx.x; j < cols; j += blockDim.x) dxr[j] = yr[j] * (dyr[j] - dot);
}

// x: [rows, cols] -> out: [rows] (u32). The index of the largest element, the first of equal
// maxima, NaN counted as -inf (a row of only -inf/NaN gives 0), as the CPU's argmax_rows.
// Each thread scans its columns in increasing order keeping the first strict maximum; the
// block then merges (value, index) pairs, ties going to the smaller index.
extern "C" __global__ void forge_argmax_rows(const float* x, u32* out, i64 rows, i64 cols) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * cols;
  float best_v = forge_neg_inf();
  i64 best_i = FORGE_NO_INDEX;
  // Columns in batches of 8 a thread, all 8 reads issued before the first comparison (a
  // decode step's one row of 50257 logits is one block, bound by load latency); each thread
  // still sees its columns in ascending order.
  const i64 step = blockDim.x;
  for (i64 j0 = threadIdx.x; j0 < cols; j0 += 8 * step) {
    float vals[8];
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (j0 + u * step < cols) vals[u] = xr[j0 + u * step];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const i64 j = j0 + u * step;
      if (j >= cols) break;
      float v = vals[u];
      if (v != v) v = forge_neg_inf();  // NaN
      if (best_i == FORGE_NO_INDEX || v > best_v) {
        best_v = v;
        best_i = j;
      }
    }
  }
  forge_block_argmax(best_v, best_i);
  if (threadIdx.x == 0) out[r] = best_i == FORGE_NO_INDEX ? 0u : (u32)best_i;
}
