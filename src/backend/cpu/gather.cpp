// CPU index-driven kernels: embedding, scatter_add_rows, gather_nll, ce_bwd, softmax_xent. Ids and
// targets were range-checked by the ops layer.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/span_loops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const uint32_t* pid = ids.data<uint32_t>();
  const float* pt = table.data<float>();
  float* po = out.data<float>();
  const int64_t C = table.dim(1);
  parallel_for(ids.numel(), row_grain(C, kGrainElems), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = static_cast<int64_t>(pid[i]);  // validated by ops/gather.cpp
      std::memcpy(po + i * C, pt + row * C, static_cast<size_t>(C) * sizeof(float));
    }
  });
}

void CpuBackend::scatter_add_rows(const Tensor& ids, const Tensor& src, Tensor& out) {
  const uint32_t* pid = ids.data<uint32_t>();
  const float* ps = src.data<float>();
  float* po = out.data<float>();
  const int64_t N = ids.numel();
  const int64_t C = src.shape().cols();
  // Threads own disjoint column ranges and each walks all ids in index order: every output
  // element is summed in index order by one thread, whatever the thread count.
  const int64_t grain = std::max<int64_t>(16, kGrainElems / std::max<int64_t>(N, 1));
  parallel_for(C, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < N; ++i) {
      const float* s = ps + i * C;
      float* d = po + static_cast<int64_t>(pid[i]) * C;
      for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
    }
  });
}

void CpuBackend::gather_nll(const Tensor& logits, const Tensor& targets, Tensor& out) {
  const float* pl = logits.data<float>();
  const uint32_t* pt = targets.data<uint32_t>();
  float* po = out.data<float>();
  const int64_t V = logits.shape().cols();
  const auto lse = pick(logsumexp_avx512, logsumexp_avx2, logsumexp_loop);
  parallel_for(logits.shape().rows(), row_grain(V, kGrainTranscendental),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const float* row = pl + r * V;
                   po[r] = lse(row, V) - row[pt[r]];
                 }
               });
}

void CpuBackend::ce_bwd(const Tensor& logits, const Tensor& targets, float scale, Tensor& out) {
  const float* pl = logits.data<float>();
  const uint32_t* pt = targets.data<uint32_t>();
  float* po = out.data<float>();
  const int64_t V = logits.shape().cols();
  parallel_for(logits.shape().rows(), row_grain(V, kGrainTranscendental),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   // d = (softmax(row) - onehot(target)) * scale
                   softmax_row(pl + r * V, po + r * V, V, scale);
                   po[r * V + pt[r]] -= scale;
                 }
               });
}

void CpuBackend::softmax_xent(const Tensor& targets, Tensor& logits, Tensor& nll) {
  const uint32_t* pt = targets.data<uint32_t>();
  float* pl = logits.data<float>();
  float* po = nll.data<float>();
  const int64_t V = logits.shape().cols();
  const auto lse = pick(logsumexp_avx512, logsumexp_avx2, logsumexp_loop);
  parallel_for(logits.shape().rows(), row_grain(V, kGrainTranscendental),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   float* row = pl + r * V;
                   po[r] = lse(row, V) - row[pt[r]];
                   softmax_row(row, row, V, 1.0f);  // reads each element before writing it
                   row[pt[r]] -= 1.0f;
                 }
               });
}

}  // namespace forge::cpu
