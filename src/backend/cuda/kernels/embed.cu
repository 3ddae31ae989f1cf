// Embedding row gather and its backward, scatter-add of rows.
//   forge_embedding: one block of 256 per id (grid.x = n).
//   forge_scatter_add_rows: grid ceil(C / 256), one thread per column.

// ids: [n] u32; table: [V, C]; out: [n, C]; out[i, :] = table[ids[i], :]. An id >= V (a
// trusted device id out of range) leaves its row unwritten: nothing outside the table is read.
extern "C" __global__ void forge_embedding(const u32* ids, const float* table, float* out, i64 n,
                                           i64 V, i64 C) {
  const i64 i = blockIdx.x;
  if (i >= n) return;
  const i64 id = ids[i];
  if (id >= V) return;
  const float* src = table + id * C;
  float* dst = out + i * C;
  for (i64 c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

// ids: [n] u32; src: [n, C]; out: [num_rows, C], zeroed by the host. For i = 0..n-1 in
// order, out[ids[i], c] += src[i, c]: each column is owned by one thread that walks every id
// in index order, so each output element is summed in the CPU's order (bit-identical) and no
// atomics are needed. Ids >= num_rows are skipped.
extern "C" __global__ void forge_scatter_add_rows(const u32* ids, const float* src, float* out,
                                                  i64 n, i64 num_rows, i64 C) {
  const i64 c = blockIdx.x * (i64)blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (i64 i = 0; i < n; ++i) {
    const i64 id = ids[i];
    if (id < num_rows) out[id * C + c] += src[i * C + c];
  }
}
