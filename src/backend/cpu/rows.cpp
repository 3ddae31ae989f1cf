// CPU row kernels: softmax (+ causal mask), softmax_bwd, layernorm, layernorm_bwd, sum_rows.
// Row ops split rows over the thread pool. The column reductions are deterministic for any
// thread count, without atomics: sum_rows splits columns (each output summed by one thread
// in row order); layernorm_bwd sums fixed row chunks, then adds the chunks in order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/span_loops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {
namespace {

// Columns per band of a column reduction: wide enough for whole vectors and cache lines.
constexpr int64_t kBand = 64;

}  // namespace

void softmax_row(const float* x, float* y, int64_t n, float scale) {
  static const auto span = pick(softmax_row_avx512, softmax_row_avx2, softmax_row_loop);
  span(x, y, n, scale);
}

void CpuBackend::softmax(const Tensor& x, bool causal, int64_t offset, Tensor& out) {
  const float* px = x.data<float>();
  float* py = out.data<float>();
  const int64_t S = x.shape().cols();
  const int64_t R = x.shape().rows();
  const int64_t T = causal ? x.dim(-2) : 1;
  parallel_for(R, row_grain(S, kGrainTranscendental), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // Row i (its index along dim -2) sees columns j <= i + offset (offset >= 0 here).
      int64_t n = S;
      if (causal) {
        const int64_t i = r % T;
        if (offset < S - i) n = i + offset + 1;  // written so that it cannot overflow
      }
      softmax_row(px + r * S, py + r * S, n, 1.0f);
      // Masked entries are exact zeros: softmax_bwd relies on it.
      if (n < S) std::memset(py + r * S + n, 0, static_cast<size_t>(S - n) * sizeof(float));
    }
  });
}

void CpuBackend::softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float* py = y.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const int64_t S = y.shape().cols();
  parallel_for(y.shape().rows(), row_grain(S, kGrainElems), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = py + r * S;
      const float* dyr = pdy + r * S;
      float* dxr = pdx + r * S;
      // dx = y * (dy - <y, dy>)
      const float dot = row_dot(yr, dyr, S);
      for (int64_t c = 0; c < S; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
    }
  });
}

void CpuBackend::layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                           Tensor& out) {
  const float* px = x.data<float>();
  const float* pg = gamma.data<float>();
  const float* pb = beta.data<float>();
  float* py = out.data<float>();
  const int64_t C = x.shape().cols();
  const auto row = pick(layernorm_row_avx512, layernorm_row_avx2, layernorm_row_loop);
  parallel_for(x.shape().rows(), row_grain(C, kGrainElems), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) row(px + r * C, pg, pb, eps, py + r * C, C);
  });
}

void CpuBackend::layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps,
                               Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const float* px = x.data<float>();
  const float* pg = gamma.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const int64_t C = x.shape().cols();
  const int64_t R = x.shape().rows();
  // One pass over x and dy: each fixed chunk of kChunkRows rows computes its dx rows and
  // float partial sums of dgamma/dbeta; the partials are then added in chunk order, in
  // double. Chunks do not depend on the thread count, so neither does the result.
  constexpr int64_t kChunkRows = 32;
  const int64_t n_chunks = (R + kChunkRows - 1) / kChunkRows;
  std::vector<float> part(static_cast<size_t>(n_chunks * 2 * C), 0.0f);  // [chunk][dg|db][C]
  // The AVX2 build serves AVX-512 machines too: not worth hand-written intrinsics.
  const auto row = pick(layernorm_bwd_row_avx2, layernorm_bwd_row_avx2, layernorm_bwd_row_loop);
  parallel_for(n_chunks, std::max<int64_t>(1, kGrainElems / (kChunkRows * C)),
               [&](int64_t k0, int64_t k1) {
                 for (int64_t k = k0; k < k1; ++k) {
                   float* dg = part.data() + k * 2 * C;
                   float* db = dg + C;
                   const int64_t r1 = std::min(R, (k + 1) * kChunkRows);
                   for (int64_t r = k * kChunkRows; r < r1; ++r)
                     row(px + r * C, pg, pdy + r * C, eps, pdx + r * C, C, dg, db);
                 }
               });
  float* pdg = dgamma.data<float>();
  float* pdb = dbeta.data<float>();
  parallel_for(C, std::max<int64_t>(64, kGrainElems / (2 * n_chunks)), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double g = 0.0, b = 0.0;
      for (int64_t k = 0; k < n_chunks; ++k) {
        g += part[static_cast<size_t>(k * 2 * C + c)];
        b += part[static_cast<size_t>(k * 2 * C + C + c)];
      }
      pdg[c] = static_cast<float>(g);
      pdb[c] = static_cast<float>(b);
    }
  });
}

void CpuBackend::argmax_rows(const Tensor& x, Tensor& out) {
  const float* px = x.data<float>();
  uint32_t* po = out.data<uint32_t>();
  const int64_t V = x.shape().cols();
  parallel_for(x.shape().rows(), row_grain(V, kGrainElems), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = px + r * V;
      // NaN as -inf: it never compares greater, and a first NaN is replaced by any number.
      int64_t best = 0;
      float best_v = std::isnan(row[0]) ? -std::numeric_limits<float>::infinity() : row[0];
      for (int64_t j = 1; j < V; ++j)
        if (row[j] > best_v) {
          best_v = row[j];
          best = j;
        }
      po[r] = static_cast<uint32_t>(best);
    }
  });
}

void CpuBackend::sum_rows(const Tensor& x, Tensor& out) {
  const float* px = x.data<float>();
  float* po = out.data<float>();
  const int64_t C = x.shape().cols();
  const int64_t R = x.shape().rows();
  const int64_t n_bands = (C + kBand - 1) / kBand;
  parallel_for(n_bands, std::max<int64_t>(1, kGrainElems / (kBand * R)),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t b = b0; b < b1; ++b) {
                   const int64_t c0 = b * kBand;
                   const int64_t w = std::min(kBand, C - c0);
                   double acc[kBand] = {};
                   for (int64_t r = 0; r < R; ++r) {
                     const float* xr = px + r * C + c0;
                     for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(xr[j]);
                   }
                   for (int64_t j = 0; j < w; ++j) po[c0 + j] = static_cast<float>(acc[j]);
                 }
               });
}

}  // namespace forge::cpu
