// CPU elementwise kernels: add, gelu, gelu_bwd, scale, dropout, adamw, sumsq. Flat loops
// split over the thread pool in contiguous ranges. The exp- and hash-heavy spans (gelu,
// gelu_bwd, dropout, adamw) come from vec_kernels.h / span_loops.h for the CPU's
// instruction set; the memory-bound ones are plain loops here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/span_loops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  if (b.numel() == a.numel()) {
    parallel_for(a.numel(), kGrainElems, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] + pb[i];
    });
    return;
  }
  // b is a row vector [C], added to every row of a.
  const int64_t C = b.numel();
  parallel_for(a.numel() / C, row_grain(C, kGrainElems), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* ar = pa + r * C;
      float* orow = po + r * C;
      for (int64_t c = 0; c < C; ++c) orow[c] = ar[c] + pb[c];
    }
  });
}

void gelu_span(const float* x, float* y, int64_t n) {
  static const auto span = pick(gelu_avx512, gelu_avx2, gelu_loop);
  span(x, y, n);
}

void CpuBackend::gelu(const Tensor& x, Tensor& out) {
  const float* px = x.data<float>();
  float* py = out.data<float>();
  parallel_for(x.numel(), kGrainTranscendental,
               [&](int64_t i0, int64_t i1) { gelu_span(px + i0, py + i0, i1 - i0); });
}

void CpuBackend::gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const auto span = pick(gelu_bwd_avx512, gelu_bwd_avx2, gelu_bwd_loop);
  parallel_for(x.numel(), kGrainTranscendental,
               [&](int64_t i0, int64_t i1) { span(px + i0, pdy + i0, pdx + i0, i1 - i0); });
}

void CpuBackend::scale(const Tensor& x, float s, Tensor& out) {
  const float* px = x.data<float>();
  float* po = out.data<float>();
  parallel_for(x.numel(), kGrainElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) po[i] = px[i] * s;
  });
}

void CpuBackend::dropout(const Tensor& x, uint64_t seed, uint64_t index0, uint32_t threshold,
                         float scale, Tensor& out) {
  const float* px = x.data<float>();
  float* po = out.data<float>();
  // The mask depends only on (seed, flat index), so any split over threads gives the same
  // result, bit for bit, as every other backend.
  const auto span = pick(dropout_avx512, dropout_avx2, dropout_loop);
  parallel_for(x.numel(), kGrainElems, [&](int64_t i0, int64_t i1) {
    span(px + i0, po + i0, i1 - i0, index0 + static_cast<uint64_t>(i0), seed, threshold, scale);
  });
}

void CpuBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                       const AdamWStep& k) {
  // torch.optim.AdamW (non-fused, non-amsgrad), the constants formed by the ops layer.
  float* pp = param.data<float>();
  const float* pg = grad.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const auto span = use_avx512() ? adamw_avx512 : adamw_loop;
  parallel_for(param.numel(), kGrainElems, [&](int64_t i0, int64_t i1) {
    span(pp + i0, pg + i0, pm + i0, pv + i0, i1 - i0, k);
  });
}

void CpuBackend::sumsq(const Tensor& x, Tensor& out) {
  // Fixed-size chunks, each summed in double, then the partials added in chunk order: the
  // result does not depend on the number of threads.
  constexpr int64_t kChunk = 1 << 16;
  const float* px = x.data<float>();
  const int64_t n = x.numel();
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(n_chunks));
  parallel_for(n_chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t i0 = c * kChunk;
      const int64_t i1 = std::min(n, i0 + kChunk);
      double acc[8] = {};  // 8 lanes: vectorizes without reassociating one long chain
      int64_t i = i0;
      for (; i + 8 <= i1; i += 8)
        for (int j = 0; j < 8; ++j) {
          const double v = px[i + j];
          acc[j] += v * v;
        }
      for (; i < i1; ++i) acc[0] += static_cast<double>(px[i]) * px[i];
      double s = 0.0;
      for (double a : acc) s += a;
      partial[static_cast<size_t>(c)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  out.data<float>()[0] = static_cast<float>(total);
}

}  // namespace forge::cpu
