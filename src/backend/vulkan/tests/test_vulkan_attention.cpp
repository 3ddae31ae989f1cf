// Each of Vulkan's prefill attention tiles (the setting attention_tile), whichever the
// device would pick, against the float64 reference, with the kernel that ran checked by
// its profile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ci.h"
#include "forge/backend.h"
#include "forge/forge.h"
#include "reference.h"
#include "scoped_setting.h"

namespace forge::test {
namespace {

std::vector<float> wave(size_t n, float phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 0.61f + phase);
  return v;
}

TEST(VulkanAttention, EveryPrefillTileMatchesFloat64) {
  struct Case {
    int64_t B, T, H, D, pos;  // pos > 0: caches of pos + T + 3 rows, rows < pos given
  };
  // T = 9 (the smallest prefill, under one 64-query tile), 64 (exactly one), 100 (one and a
  // part), 150 (three, the last partial); hd 16, 40 (not a multiple of 16) and 64; several
  // heads and batches; caches at pos 0 and past it (old keys from the caches, new from qkv).
  const std::vector<Case> cases = {{1, 9, 3, 64, 0},    {2, 64, 2, 64, 0},   {1, 100, 2, 40, 0},
                                   {2, 150, 1, 16, 0},  {1, 9, 2, 40, 5},    {1, 70, 3, 64, 0},
                                   {2, 100, 2, 64, 37}, {1, 150, 2, 40, 70}, {1, 64, 4, 16, 64}};
  bool ran = false;
  for (const DeviceInfo& info : list_devices()) {
    if (info.device.backend() != "vulkan") continue;
    ran = true;
    const Device dev = info.device;
    for (const std::string tile : {"small", "big"}) {
      const ScopedSetting setting(dev, "attention_tile", tile);
      const std::string kernel = "attention_prefill" + (tile == "small" ? "" : "_" + tile);
      for (const Case& c : cases) {
        const int64_t C = c.H * c.D, G = c.B * c.H, cap = c.pos + c.T + 3;
        const bool cached = c.pos > 0;
        SCOPED_TRACE(dev.str() + " " + tile + " B=" + std::to_string(c.B) +
                     " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
                     " D=" + std::to_string(c.D) + " pos=" + std::to_string(c.pos));
        const std::vector<float> x = wave(static_cast<size_t>(c.B * c.T * 3 * C), 0.1f);
        const std::vector<float> kc0 = wave(static_cast<size_t>(G * cap * c.D), 1.7f);
        const std::vector<float> vc0 = wave(static_cast<size_t>(G * cap * c.D), 2.9f);
        const Tensor qkv = Tensor::from_vector(x, {c.B, c.T, 3 * C}, dev);
        Tensor kc = Tensor::from_vector(kc0, {G, cap, c.D}, dev);
        Tensor vc = Tensor::from_vector(vc0, {G, cap, c.D}, dev);
        Backend& be = backend_for(dev);
        be.set_profiling(true);
        const Tensor y = cached ? attention(qkv, c.H, kc, vc, c.pos) : attention(qkv, c.H);
        const std::vector<float> got = y.to_vector<float>();
        // The tile asked for is the kernel that ran.
        bool dispatched = false;
        for (const KernelTime& k : be.kernel_times()) dispatched |= k.kernel == kernel;
        be.set_profiling(false);
        EXPECT_TRUE(dispatched) << kernel << " did not run";

        const ref::Vec none;
        const ref::Attention r =
            ref::attention(ref::widen(x), c.B, c.T, c.H, c.D, cached ? ref::widen(kc0) : none,
                           cached ? ref::widen(vc0) : none, cached ? cap : 0, c.pos);
        ASSERT_EQ(got.size(), r.y.size());
        double worst = 0.0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - r.y[i]));
        EXPECT_LE(worst, 1e-5);
        if (cached) {  // rows pos..pos+T-1 are the new keys/values, the others untouched
          const std::vector<float> kc1 = kc.to_vector<float>(), vc1 = vc.to_vector<float>();
          for (size_t i = 0; i < kc1.size(); ++i) {
            ASSERT_EQ(kc1[i], r.k_cache[i]) << "k cache element " << i;
            ASSERT_EQ(vc1[i], r.v_cache[i]) << "v cache element " << i;
          }
        }
      }
    }
  }
  if (!ran) FORGE_SKIP_NO_DEVICE("no Vulkan device");
}

}  // namespace
}  // namespace forge::test
