// CPU fused causal attention (CpuBackend::attention): the new keys/values go to the caches,
// then one pool task per (batch*head, tile of kAttnBr queries) runs the tile kernel of
// attention_loops.h (this file holds its baseline-ISA build).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/attention_loops.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu {

void attention_tile_baseline(const AttnTile& t, float* scratch) { attention_tile_loop(t, scratch); }

void CpuBackend::attention(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                           int64_t pos, Tensor& out) {
  // qkv: [B, T, 3C] (q | k | v, heads contiguous in each); caches: [B*H, cap, hd];
  // out: [B, T, C].
  const int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2), H = n_head, hd = C / H;
  const int64_t G = B * H;
  const float* src = qkv.data<float>();
  float* y = out.data<float>();
  const bool cached = k_cache.defined();
  const int64_t cap = cached ? k_cache.dim(1) : 0;

  // 1. With caches: k, v of the new positions to rows pos..pos+T-1, one (b, h) per item.
  //    Attention then reads every key from the cache (contiguous rows of hd).
  if (cached) {
    float* kc = k_cache.data<float>();
    float* vc = v_cache.data<float>();
    parallel_for(G, row_grain(2 * T * hd, kGrainElems), [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t b = g / H, h = g % H;
        for (int64_t t = 0; t < T; ++t) {
          const float* row = src + (b * T + t) * 3 * C + h * hd;
          const size_t bytes = static_cast<size_t>(hd) * sizeof(float);
          std::memcpy(kc + (g * cap + pos + t) * hd, row + C, bytes);
          std::memcpy(vc + (g * cap + pos + t) * hd, row + 2 * C, bytes);
        }
      }
    });
  }

  // 2. Tiles. The last query tiles see the most keys: hand them out first so that the
  //    pool's dynamic claiming balances the causal triangle.
  const auto kernel = pick(attention_tile_avx512, attention_tile_avx2, attention_tile_baseline);
  const int64_t tiles = (T + kAttnBr - 1) / kAttnBr;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  run_tasks(G * tiles, [&](int64_t task) {
    const int64_t tile = tiles - 1 - task / G, g = task % G;
    const int64_t b = g / H, h = g % H;
    const int64_t t0 = tile * kAttnBr;
    AttnTile a;
    a.rows = std::min(kAttnBr, T - t0);
    a.q = src + (b * T + t0) * 3 * C + h * hd;
    a.q_stride = 3 * C;
    if (cached) {
      a.k = k_cache.data<float>() + g * cap * hd;
      a.v = v_cache.data<float>() + g * cap * hd;
      a.kv_stride = hd;
    } else {
      a.k = src + b * T * 3 * C + C + h * hd;
      a.v = a.k + C;
      a.kv_stride = 3 * C;
    }
    a.y = y + (b * T + t0) * C + h * hd;
    a.y_stride = C;
    a.first = pos + t0;
    a.hd = hd;
    a.scale = scale;
    std::vector<float> scratch(attn_scratch_floats(a));
    kernel(a, scratch.data());
  });
}

void CpuBackend::attention_at(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                              const Tensor& pos, Tensor& out) {
  // The position is host data here; clamped like the GPU kernels clamp theirs (the ops
  // layer has already refused one out of range).
  const int64_t at = std::min<int64_t>(pos.data<uint32_t>()[0], k_cache.dim(1) - out.dim(1));
  attention(qkv, n_head, k_cache, v_cache, at, out);
}

}  // namespace forge::cpu
