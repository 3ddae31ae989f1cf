// CPU row kernels: softmax (+ causal mask), softmax_bwd, layernorm, layernorm_bwd, sum_rows.
// Row ops split rows over the thread pool; the column reductions (dgamma, dbeta, sum_rows)
// split columns instead, so that every output element is summed by one thread in row order:
// deterministic for any thread count, no atomics, no per-thread partial buffers.
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
  std::vector<float> mean(static_cast<size_t>(R)), rstd(static_cast<size_t>(R));

  // dx, row by row. With xhat = (x - mean) rstd and g = dy * gamma:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
  parallel_for(R, row_grain(C, kGrainElems), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * C;
      const float* dyr = pdy + r * C;
      float* dxr = pdx + r * C;
      float mu, rs;
      row_mean_rstd(xr, C, eps, mu, rs);
      mean[static_cast<size_t>(r)] = mu;
      rstd[static_cast<size_t>(r)] = rs;
      float sg[kLanes] = {}, sgx[kLanes] = {};
      int64_t c = 0;
      for (; c + kLanes <= C; c += kLanes)
        for (int j = 0; j < kLanes; ++j) {
          const float g = dyr[c + j] * pg[c + j];
          sg[j] += g;
          sgx[j] += g * (xr[c + j] - mu) * rs;
        }
      for (; c < C; ++c) {
        const float g = dyr[c] * pg[c];
        sg[0] += g;
        sgx[0] += g * (xr[c] - mu) * rs;
      }
      float sum_g = 0.0f, sum_gx = 0.0f;
      for (int j = 0; j < kLanes; ++j) {
        sum_g += sg[j];
        sum_gx += sgx[j];
      }
      const float mean_g = sum_g / static_cast<float>(C);
      const float mean_gx = sum_gx / static_cast<float>(C);
      for (c = 0; c < C; ++c) {
        const float xhat = (xr[c] - mu) * rs;
        dxr[c] = rs * (dyr[c] * pg[c] - mean_g - xhat * mean_gx);
      }
    }
  });

  // dgamma = sum over rows of dy * xhat, dbeta = sum of dy: column bands, double sums.
  float* pdg = dgamma.data<float>();
  float* pdb = dbeta.data<float>();
  const int64_t n_bands = (C + kBand - 1) / kBand;
  parallel_for(n_bands, std::max<int64_t>(1, kGrainElems / (kBand * R)),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t b = b0; b < b1; ++b) {
                   const int64_t c0 = b * kBand;
                   const int64_t w = std::min(kBand, C - c0);
                   double ag[kBand] = {}, ab[kBand] = {};
                   for (int64_t r = 0; r < R; ++r) {
                     const float* xr = px + r * C + c0;
                     const float* dyr = pdy + r * C + c0;
                     const float mu = mean[static_cast<size_t>(r)];
                     const float rs = rstd[static_cast<size_t>(r)];
                     for (int64_t j = 0; j < w; ++j) {
                       ag[j] += static_cast<double>(dyr[j] * ((xr[j] - mu) * rs));
                       ab[j] += static_cast<double>(dyr[j]);
                     }
                   }
                   for (int64_t j = 0; j < w; ++j) {
                     pdg[c0 + j] = static_cast<float>(ag[j]);
                     pdb[c0 + j] = static_cast<float>(ab[j]);
                   }
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
