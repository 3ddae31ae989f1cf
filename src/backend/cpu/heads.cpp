// CPU head-layout kernels: split_heads, merge_heads, unsplit_head, unmerge_heads.
// Pure copies of head-sized runs (hd floats); threads take contiguous ranges of runs.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {
namespace {

void copy_floats(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

void CpuBackend::split_heads(const Tensor& qkv, int64_t n_head, int part, Tensor& out) {
  // qkv: [B, T, 3C] -> out: [B*nh, T, hd]; out[b*nh + h, t, :] = qkv[b, t, part*C + h*hd :]
  const float* src = qkv.data<float>();
  float* dst = out.data<float>();
  const int64_t T = out.dim(1), hd = out.dim(2);
  const int64_t C = n_head * hd;
  parallel_for(out.dim(0) * T, row_grain(hd, kGrainElems), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t bh = o / T, t = o % T;
      const int64_t b = bh / n_head, h = bh % n_head;
      copy_floats(dst + o * hd, src + (b * T + t) * 3 * C + part * C + h * hd, hd);
    }
  });
}

void CpuBackend::merge_heads(const Tensor& x, int64_t n_head, Tensor& out) {
  // x: [B*nh, T, hd] -> out: [B, T, nh*hd]; out[b, t, h*hd :] = x[b*nh + h, t, :]
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  const int64_t T = x.dim(1), hd = x.dim(2);
  const int64_t C = n_head * hd;
  // Iterate over output runs so that each thread writes one contiguous range.
  parallel_for(out.dim(0) * T * n_head, row_grain(hd, kGrainElems), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t bt = o / n_head, h = o % n_head;
      const int64_t b = bt / T, t = bt % T;
      copy_floats(dst + bt * C + h * hd, src + ((b * n_head + h) * T + t) * hd, hd);
    }
  });
}

void CpuBackend::unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t n_head,
                              Tensor& out) {
  // dq/dk/dv: [B*nh, T, hd] -> out: [B, T, 3C]; out[b, t, part*C + h*hd :] = d{part}[b*nh+h, t]
  const float* parts[3] = {dq.data<float>(), dk.data<float>(), dv.data<float>()};
  float* dst = out.data<float>();
  const int64_t T = dq.dim(1), hd = dq.dim(2);
  const int64_t C = n_head * hd;
  const int64_t runs_per_bt = 3 * n_head;
  parallel_for(out.dim(0) * T * runs_per_bt, row_grain(hd, kGrainElems),
               [&](int64_t o0, int64_t o1) {
                 for (int64_t o = o0; o < o1; ++o) {
                   const int64_t bt = o / runs_per_bt, k = o % runs_per_bt;
                   const int64_t part = k / n_head, h = k % n_head;
                   const int64_t b = bt / T, t = bt % T;
                   copy_floats(dst + bt * 3 * C + part * C + h * hd,
                               parts[part] + ((b * n_head + h) * T + t) * hd, hd);
                 }
               });
}

void CpuBackend::unmerge_heads(const Tensor& x, int64_t n_head, Tensor& out) {
  // x: [B, T, C] -> out: [B*nh, T, hd]; out[b*nh + h, t, :] = x[b, t, h*hd :]
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  const int64_t T = out.dim(1), hd = out.dim(2);
  const int64_t C = n_head * hd;
  parallel_for(out.dim(0) * T, row_grain(hd, kGrainElems), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t bh = o / T, t = o % T;
      const int64_t b = bh / n_head, h = bh % n_head;
      copy_floats(dst + o * hd, src + (b * T + t) * C + h * hd, hd);
    }
  });
}

}  // namespace forge::cpu
