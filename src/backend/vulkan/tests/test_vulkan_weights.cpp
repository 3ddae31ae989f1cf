// The Vulkan kernels of weights in f16, bf16, q8_0 and q4_0 (weight_kernels.cpp) beyond the
// op harness's cases: products of one block equal forge/ops.h's formula bit for bit (the
// activation rounding, its correctly rounded d and 1 / d included), rows at odd byte
// offsets (odd K in 16 bits), and weights bound in windows of rows. The expected values are
// computed here from the stored bytes (not by the CPU's kernels, whose f32 operation order
// may differ within the harness's tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/vulkan/tests/vulkan_test_util.h"
#include "backend/vulkan/vulkan_backend.h"
#include "forge/forge.h"
#include "forge/quantize.h"
#include "io/half.h"
#include "scoped_setting.h"

namespace forge::test {
namespace {

// Rows whose amax spans many binades and significands (amax / 127 and its reciprocal round
// differently from row to row).
std::vector<float> varied_rows(int64_t rows, int64_t K) {
  std::vector<float> v(static_cast<size_t>(rows * K));
  for (int64_t r = 0; r < rows; ++r) {
    const float s =
        std::ldexp(1.0f + 0.00731f * static_cast<float>(r), static_cast<int>(r % 23) - 11);
    for (int64_t k = 0; k < K; ++k)
      v[static_cast<size_t>(r * K + k)] = s * std::sin(0.61f * static_cast<float>(k * 7 + r));
  }
  return v;
}

// n values of one scale that do not repeat along a row: scale * sin(0.37 i + i / 97).
std::vector<float> waves(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = static_cast<float>(i);
    v[i] = scale * std::sin(0.37f * x + x / 97.0f);
  }
  return v;
}

// The values stored by a weight of dtype t ([rows, K] row-major), as the kernels read them.
std::vector<float> stored_values(const Tensor& w, DType t) {
  const std::vector<uint8_t> raw = w.to_bytes();
  std::vector<float> v(static_cast<size_t>(w.numel()));
  auto half = [&](size_t at) {
    return static_cast<uint16_t>(raw[at] | static_cast<uint16_t>(raw[at + 1]) << 8);
  };
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F16) {
      v[i] = io::f16_to_f32(half(2 * i));
    } else if (t == DType::BF16) {
      v[i] = std::bit_cast<float>(io::bf16_to_f32_bits(half(2 * i)));
    } else if (t == DType::Q8_0) {
      v[i] = io::f16_to_f32(half(i / 32 * 34)) *
             static_cast<float>(static_cast<int8_t>(raw[i / 32 * 34 + 2 + i % 32]));
    } else {
      const size_t b = i / 32 * 18, j = i % 32;
      const int q = j < 16 ? (raw[b + 2 + j] & 0x0F) : (raw[b + 2 + j - 16] >> 4);
      v[i] = io::f16_to_f32(half(b)) * static_cast<float>(q - 8);
    }
  }
  return v;
}

// K = 32: every output is (dw * d) * dot of one block, alpha = 1 and no bias: forge/ops.h's
// (computed here) and the device's must be the same floats (any activation rounded differently
// shows), in the GEMV (3 rows) and the tiles (300 rows).
TEST_F(Vulkan, BlockWeightProductsOfOneBlockFollowTheFormulaBitForBit) {
  constexpr int64_t K = 32, N = 24;
  const Tensor w32 = Tensor::from_vector(varied_rows(N, K), {N, K});
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    if (!device_runs_weights(dev_, t)) GTEST_SKIP() << "no shaderFloat64 on this device";
    const Tensor w = convert_weights(w32, t);
    const std::vector<float> wv = stored_values(w, t);
    const std::vector<uint8_t> raw = w.to_bytes();
    for (int64_t M : {3, 300}) {
      const std::vector<float> av = varied_rows(M, K);
      // forge/ops.h: d = amax / 127, id = 1 / d (f32), q = clamp(round_half_even(x id)),
      // out = (dw * d) * dot with dw the block's f16 scale and dot exact.
      std::vector<float> want(static_cast<size_t>(M * N));
      for (int64_t r = 0; r < M; ++r) {
        float amax = 0.0f;
        for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(av[size_t(r * K + k)]));
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int64_t n = 0; n < N; ++n) {
          const size_t bb = t == DType::Q8_0 ? 34 : 18;
          const float dw = io::f16_to_f32(
              static_cast<uint16_t>(raw[size_t(n) * bb] | raw[size_t(n) * bb + 1] << 8));
          int64_t dot = 0;
          for (int64_t k = 0; k < K; ++k) {
            const float q = std::clamp(std::nearbyint(av[size_t(r * K + k)] * id), -127.0f, 127.0f);
            dot += static_cast<int64_t>(q) *
                   static_cast<int64_t>(std::lround(wv[size_t(n * K + k)] / dw));
          }
          want[size_t(r * N + n)] = (dw * d) * static_cast<float>(dot);
        }
      }
      const MatmulSpec spec{.trans_b = true};
      const Tensor a = Tensor::from_vector(av, {M, K});
      const std::vector<float> got = matmul(a.to(dev_), w.to(dev_), spec).to_vector<float>();
      EXPECT_EQ(got, want) << dtype_name(t) << ", M = " << M;
    }
  }
}

// f16 / bf16 rows of odd K start at odd halves (2-byte aligned): the GEMV's element path and
// the tiles' reads; an embedding of odd width likewise. Then with windows of 4 KiB: the
// weight rows split over several dispatches.
TEST_F(Vulkan, SixteenBitWeightsOfOddWidthAndInWindowsMatchFloat64) {
  constexpr int64_t K = 37, N = 300;
  const Tensor w32 = Tensor::from_vector(varied_rows(N, K), {N, K});
  const Tensor bias = Tensor::from_vector(varied_rows(1, N), {N});
  for (const bool windows : {false, true}) {
    const ScopedSetting window(dev_, "window_bytes", windows ? "4096" : "auto");
    for (DType t : {DType::F16, DType::BF16}) {
      const Tensor w = convert_weights(w32, t);
      for (int64_t M : {1, 70}) {
        const Tensor a = Tensor::from_vector(varied_rows(M, K), {M, K});
        const MatmulSpec spec{.trans_b = true, .gelu = true};
        // The product in float64 of the stored values, then bias and GELU; each within f32
        // rounding of its terms' magnitude (rows up to 2^11 against weights up to 2^11
        // cancel).
        const std::vector<float> av = a.to_vector<float>(), wv = stored_values(w, t);
        const std::vector<float> bv = bias.to_vector<float>();
        const std::vector<float> got =
            matmul(a.to(dev_), w.to(dev_), spec, bias.to(dev_)).to_vector<float>();
        ASSERT_EQ(got.size(), static_cast<size_t>(M * N));
        int bad = 0;
        for (int64_t r = 0; r < M; ++r)
          for (int64_t n = 0; n < N; ++n) {
            double s = bv[size_t(n)], mag = std::fabs(s);
            for (int64_t k = 0; k < K; ++k) {
              const double term =
                  static_cast<double>(av[size_t(r * K + k)]) * wv[size_t(n * K + k)];
              s += term;
              mag += std::fabs(term);
            }
            const double want =
                0.5 * s * (1.0 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
            const double err = std::fabs(got[size_t(r * N + n)] - want);
            if (!(err <= 1e-5 * mag + 1e-6) && ++bad <= 3)
              ADD_FAILURE() << dtype_name(t) << ", M = " << M << (windows ? ", windows" : "")
                            << ": out[" << r << ", " << n << "] = " << got[size_t(r * N + n)]
                            << ", want " << want << " (terms of magnitude " << mag << ")";
          }
      }
      const Tensor ids = Tensor::from_vector(std::vector<uint32_t>{0, 299, 150, 1, 298}, {5});
      EXPECT_EQ(embedding(ids.to(dev_), w.to(dev_)).to_vector<float>(),
                embedding(ids, w).to_vector<float>())
          << dtype_name(t);
    }
  }
}

// matmul_add_layernorm_matmul of one row with f16 / bf16 weights ([out, in], used
// transposed): one dispatch (gemv_chain_w16) where the chain runs, equal to the three
// dispatches it replaces (gemv_w16 accumulating, layernorm, gemv_w16) within f32 rounding
// (the products add their terms in another order; the H200 also contracts them into FMAs
// differently), whether the second phase waits for the first or computes it itself; x is
// only read. Shapes: a decode seam's, and rows of W1 longer than one step of loads (K1 >
// 2048) with N1 past 1024 and a partial last workgroup of columns.
TEST_F(Vulkan, SixteenBitSeamOfOneRowIsOneDispatch) {
  vk::Context& ctx = context_of(dev_);
  auto& vb = dynamic_cast<vk::VulkanBackend&>(backend_for(dev_));
  const bool fits = ctx.max_bindings() >= vk::kGemvChainBindings;
  struct Shape {
    int64_t N1, K1, N2;
  };
  (void)vb.take_chain_counts();
  for (const Shape sh : {Shape{96, 200, 72}, Shape{1040, 2056, 20}}) {
    const int64_t N1 = sh.N1, K1 = sh.K1, N2 = sh.N2;
    const Tensor a = Tensor::from_vector(ramp(K1), {1, K1}, dev_);
    const Tensor b1 = Tensor::from_vector(ramp(N1), {N1}, dev_);
    const Tensor g = Tensor::from_vector(ramp(N1), {N1}, dev_);
    const Tensor be = Tensor::from_vector(ramp(N1, 0.02f), {N1}, dev_);
    const Tensor b2 = Tensor::from_vector(ramp(N2), {N2}, dev_);
    const Tensor x = Tensor::from_vector(ramp(N1, 0.05f), {1, N1}, dev_);
    for (DType t : {DType::F16, DType::BF16}) {
      // Weights of one scale (not varied_rows': sums that cancel would need bounds per term).
      const Tensor w1 =
          convert_weights(Tensor::from_vector(waves(N1 * K1, 0.05f), {N1, K1}), t).to(dev_);
      const Tensor w2 =
          convert_weights(Tensor::from_vector(waves(N2 * N1, 0.05f), {N2, N1}), t).to(dev_);
      for (const char* mode : {"1", "solo"}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + ", mode " + mode + ", N1 " + std::to_string(N1));
        const ScopedSetting chain(dev_, "chain", mode);
        backend_for(dev_).synchronize();
        const uint64_t before = ctx.stats().dispatches;
        const ResidualProduct fused = matmul_add_layernorm_matmul(
            x, a, w1, b1, g, be, 1e-5f, w2, {.trans_b = true, .gelu = true}, b2, {.trans_b = true});
        const uint64_t dispatches = ctx.stats().dispatches - before;
        Tensor xt = x.clone();
        matmul_add_(xt, a, w1, {.trans_b = true}, b1);
        const Tensor two =
            matmul(layernorm(xt, g, be, 1e-5f), w2, {.trans_b = true, .gelu = true}, b2);
        if (fits) {
          EXPECT_EQ(dispatches, 1u);
        }
        // Within 1e-5 of the largest output (each sums at most 2056 terms of one sign pattern).
        for (const auto& [got, want] : {std::pair{fused.out, two}, std::pair{fused.x, xt}}) {
          const std::vector<float> w = want.to_vector<float>();
          float scale = 0.0f;
          for (float v : w) scale = std::max(scale, std::fabs(v));
          expect_near(got.to_vector<float>(), w, 1e-5 * scale, "fused vs separate");
        }
        EXPECT_EQ(x.to_vector<float>(), ramp(N1, 0.05f));
        const vk::ChainCounts c = vb.take_chain_counts();
        EXPECT_EQ(c.consumed + c.recomputed, fits ? static_cast<uint64_t>((N2 + 15) / 16) : 0u);
        if (std::string(mode) == "solo") {
          EXPECT_EQ(c.consumed, 0u);
        } else if (ctx.discrete()) {
          EXPECT_EQ(c.recomputed, 0u) << "a workgroup gave up waiting";
        }
      }
    }
  }
}

}  // namespace
}  // namespace forge::test
