// Cross-entropy kernels over logits rows: per-row negative log-likelihood and its backward.
// One block of 256 per row (grid.x = rows). logits: [rows, V]; targets: [rows] u32, already
// range-checked (< V) by the ops layer.

// out: [rows]; out[r] = logsumexp(l) - l[target], logsumexp = max + log(sum exp(l - max)).
// The exponentials are summed and logged in double, as the CPU does (a vocabulary row has
// ~50k terms). A non-finite max (all -inf, or an inf) is the logsumexp itself, as on the CPU.
extern "C" __global__ void forge_gather_nll(const float* logits, const u32* targets, float* out,
                                            i64 rows, i64 V) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;
  const float* lr = logits + r * V;
  float mx = forge_neg_inf();
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, lr[j]);
  mx = forge_block_max(mx);
  double s = 0.0;
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) s += (double)expf(lr[j] - mx);
  s = forge_block_sum_d(s);
  if (threadIdx.x == 0) {
    const bool finite = (__float_as_uint(mx) & 0x7f800000u) != 0x7f800000u;
    const float lse = finite ? mx + (float)log(s) : mx;
    out[r] = lse - lr[targets[r]];
  }
}

// out: [rows, V]; out = (softmax(l) - onehot(target)) * scale, in the CPU's order
// (ce_bwd in gather.cpp): e = exp(l - max); y = e * (scale / sum(e)); y[target] -= scale.
// __fmul_rn keeps e * k - scale from being contracted into one FMA (the CPU rounds twice).
extern "C" __global__ void forge_ce_bwd(const float* logits, const u32* targets, float* out,
                                        i64 rows, i64 V, float scale) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;
  const float* lr = logits + r * V;
  float* yr = out + r * V;
  float mx = forge_neg_inf();
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, lr[j]);
  mx = forge_block_max(mx);
  float sum = 0.0f;
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = expf(lr[j] - mx);
    yr[j] = e;  // read back below by this same thread
    sum += e;
  }
  const float k = scale / forge_block_sum(sum);
  const i64 t = targets[r];
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) {
    const float y = __fmul_rn(yr[j], k);
    yr[j] = j == t ? y - scale : y;
  }
}

// The fused classifier, in place: nll[r] as forge_gather_nll, then logits[r] = ce_bwd's row
// at scale 1, with the same sums in the same block shape (so bit for bit the two kernels).
// Three reads and one write of the row instead of gather_nll's two reads plus ce_bwd's three
// reads and a write into a second [rows, V] buffer. Thread 0 reads the target's logit before
// any thread overwrites the row.
extern "C" __global__ void forge_softmax_xent(const u32* targets, float* logits, float* nll,
                                              i64 rows, i64 V) {
  const i64 r = blockIdx.x;
  if (r >= rows) return;
  float* lr = logits + r * V;
  float mx = forge_neg_inf();
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, lr[j]);
  mx = forge_block_max(mx);
  double sd = 0.0;
  float sf = 0.0f;
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = expf(lr[j] - mx);
    sd += (double)e;
    sf += e;
  }
  sd = forge_block_sum_d(sd);
  const float k = 1.0f / forge_block_sum(sf);
  const i64 t = targets[r];
  if (threadIdx.x == 0) {
    const bool finite = (__float_as_uint(mx) & 0x7f800000u) != 0x7f800000u;
    const float lse = finite ? mx + (float)log(sd) : mx;
    nll[r] = lse - lr[t];
  }
  __syncthreads();
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) {
    const float y = __fmul_rn(expf(lr[j] - mx), k);
    lr[j] = j == t ? y - 1.0f : y;
  }
}
