// CPU elementwise kernels: add, gelu, gelu_bwd, scale, dropout, adamw, sumsq. Flat loops
// split over the thread pool in contiguous ranges; gelu and gelu_bwd use the AVX-512 span
// kernels when available, the portable loops below (auto-vectorized) otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/portable_math.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {
namespace {

constexpr float kK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kK1 = 0.044715f;

// GELU via 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) (derivation in elementwise_avx512.cpp).
// exp_fast clamps its input to [-87.3, 88], so 1 + e and e * s stay finite.
void gelu_portable(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kK0 * v * (1.0f + kK1 * v * v);
    y[i] = v / (1.0f + exp_fast(-2.0f * u));
  }
}

void gelu_bwd_portable(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kK0 * v * (1.0f + kK1 * v * v);
    const float e = exp_fast(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    const float du = kK0 * (1.0f + 3.0f * kK1 * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (e * s) * du);
  }
}

void adamw_portable(float* param, const float* g, float* m, float* v, int64_t n,
                    const AdamWCoeffs& k) {
  for (int64_t i = 0; i < n; ++i) {
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * g[i];
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
    param[i] = param[i] * k.decay - k.step_size * mi / denom;
  }
}

void dropout_portable(const float* x, float* y, int64_t n, uint64_t index0, uint64_t seed,
                      uint32_t threshold, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = (dropout_hash(seed, index0 + static_cast<uint64_t>(i)) >> 8) >= threshold;
    y[i] = select(keep, x[i] * scale, 0.0f);
  }
}

}  // namespace

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

void CpuBackend::gelu(const Tensor& x, Tensor& out) {
  const float* px = x.data<float>();
  float* py = out.data<float>();
  const auto span = use_avx512() ? gelu_avx512 : gelu_portable;
  parallel_for(x.numel(), kGrainTranscendental,
               [&](int64_t i0, int64_t i1) { span(px + i0, py + i0, i1 - i0); });
}

void CpuBackend::gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const auto span = use_avx512() ? gelu_bwd_avx512 : gelu_bwd_portable;
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

void CpuBackend::dropout(const Tensor& x, uint64_t seed, uint32_t threshold, float scale,
                         Tensor& out) {
  const float* px = x.data<float>();
  float* po = out.data<float>();
  // The mask depends only on (seed, flat index), so any split over threads gives the same
  // result, bit for bit, as every other backend.
  const auto span = use_avx512() ? dropout_avx512 : dropout_portable;
  parallel_for(x.numel(), kGrainElems, [&](int64_t i0, int64_t i1) {
    span(px + i0, po + i0, i1 - i0, static_cast<uint64_t>(i0), seed, threshold, scale);
  });
}

void CpuBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                       const AdamWParams& p) {
  // torch.optim.AdamW (non-fused, non-amsgrad):
  //   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
  //   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bci = 1 - betai^t
  // The bias corrections are computed here in double, once per call.
  const double t = static_cast<double>(p.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
  // Every coefficient is formed in double and rounded once, as torch does with its
  // Python-float hyperparameters.
  AdamWCoeffs k;
  k.decay = static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay);
  k.beta1 = p.beta1;
  k.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(p.beta1));
  k.beta2 = p.beta2;
  k.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(p.beta2));
  k.step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
  k.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  k.eps = p.eps;
  float* pp = param.data<float>();
  const float* pg = grad.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const auto span = use_avx512() ? adamw_avx512 : adamw_portable;
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
