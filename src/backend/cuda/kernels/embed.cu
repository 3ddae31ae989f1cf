// Embedding row gather and its backward, scatter-add of rows.
//   forge_embedding: one block of 256 per id (grid.x = n).
//   forge_scatter_add_rows: grid (n, ceil(C / 256)), a block per first occurrence of an id.

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

// ids: [n] u32; src: [n, C]; out: [num_rows, C] (updated in place). For i = 0..n-1 in
// order, out[ids[i], c] += src[i, c], each output element summed in index order from its
// old value, as the CPU does (bit-identical), with no atomics. Grid (n, ceil(C / 256)):
// block i works only if i is the first index of its id (its 8 warps look for an earlier
// one); it then walks j = i..n-1, warp 0 listing the matches of 1024 ids at a time in
// order (ballot + popc) and every thread adding their rows to its column. Ids >= num_rows
// are skipped. n < 2^31 (the host checks).
extern "C" __global__ void forge_scatter_add_rows(const u32* ids, const float* src, float* out,
                                                  i64 n, i64 num_rows, i64 C) {
  __shared__ int matches[1024];
  __shared__ int count;
  __shared__ int first;
  const i64 i = blockIdx.x;
  if (i >= n) return;
  const u32 id = ids[i];
  if (id >= num_rows) return;  // uniform over the block
  const i64 c = blockIdx.y * (i64)blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (threadIdx.x == 0) first = 1;
  __syncthreads();
  for (i64 j0 = (i64)warp * 32; j0 < i; j0 += (i64)warps * 32) {
    const i64 j = j0 + lane;
    if (__any_sync(0xffffffffu, j < i && ids[j] == id)) {
      first = 0;  // every writer writes 0
      break;      // the vote is the whole warp's
    }
  }
  __syncthreads();
  if (!first) return;  // uniform: read after the barrier
  float acc = c < C ? out[id * C + c] : 0.0f;
  for (i64 base = i; base < n; base += 1024) {
    if (warp == 0) {
      int k = 0;
      for (int t = 0; t < 1024; t += 32) {
        const i64 j = base + t + lane;
        const bool hit = j < n && ids[j] == id;
        const unsigned mask = __ballot_sync(0xffffffffu, hit);
        if (hit) matches[k + __popc(mask & ((1u << lane) - 1u))] = (int)j;
        k += __popc(mask);
      }
      if (lane == 0) count = k;
    }
    __syncthreads();
    if (c < C)
      for (int m = 0; m < count; ++m) acc += src[(i64)matches[m] * C + c];
    __syncthreads();
  }
  if (c < C) out[id * C + c] = acc;
}
