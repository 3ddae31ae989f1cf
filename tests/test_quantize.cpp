// forge/quantize.h: f32 -> f16 / bf16 / q8_0 / q4_0 and back, checked against independent
// computations: the CPU's own F16C conversion, a float64 nearest-even search for bf16, and
// the block formulas written out here element by element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "forge/error.h"
#include "forge/quantize.h"
#include "io/half.h"

namespace forge::test {
namespace {

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) uint16_t hardware_f16(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, 0));  // round to nearest even
}
#endif

std::vector<float> samples() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65520.0f,
                          1e6f,
                          -1e6f,
                          6.1e-5f,
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          1e-10f,
                          0.1f,
                          1.0f / 3.0f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 4000; ++i)
    v.push_back(u(rng) * std::ldexp(1.0f, static_cast<int>(i % 40) - 30));
  for (int i = 0; i < 4000; ++i) {  // arbitrary finite bit patterns
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isfinite(f)) v.push_back(f);
  }
  return v;
}

TEST(Quantize, F16RoundsToNearestEvenAsF16cDoes) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  const std::vector<float> x = samples();
  const Tensor h =
      convert_weights(Tensor::from_vector(x, {static_cast<int64_t>(x.size())}), DType::F16);
  const std::vector<uint8_t> raw = h.to_bytes();
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t got;
    std::memcpy(&got, raw.data() + 2 * i, 2);
    ASSERT_EQ(got, hardware_f16(x[i])) << "x = " << x[i];
  }
#else
  GTEST_SKIP() << "not an x86 CPU";
#endif
}

TEST(Quantize, Bf16RoundsToTheNearestBf16TiesToEven) {
  const std::vector<float> x = samples();
  const Tensor h =
      convert_weights(Tensor::from_vector(x, {static_cast<int64_t>(x.size())}), DType::BF16);
  const std::vector<uint8_t> raw = h.to_bytes();
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t got;
    std::memcpy(&got, raw.data() + 2 * i, 2);
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;  // the two neighbours (same sign)
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    const double dlo = std::fabs(static_cast<double>(x[i]) - flo);
    const double dhi = std::isfinite(fhi) ? std::fabs(static_cast<double>(fhi) - x[i]) : 1e300;
    uint32_t want = dlo < dhi ? lo : dhi < dlo ? hi : (((lo >> 16) & 1u) ? hi : lo);
    if (!std::isfinite(fhi) && dhi == 1e300 && (u & 0xffffu) >= 0x8000u) want = hi;  // to inf
    ASSERT_EQ(got, static_cast<uint16_t>(want >> 16)) << "x = " << x[i];
  }
}

// The block formulas (forge/quantize.h) written out per element.
TEST(Quantize, BlocksFollowGgmlsReferenceFormulas) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 0.02f);
  const int64_t rows = 3, cols = 96;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = n(rng);
  x[5] = 0.5f;  // a block whose extreme is positive
  for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 0.0f;  // an all-zero block
  const Tensor w = Tensor::from_vector(x, {rows, cols});
  const std::vector<uint8_t> q8 = convert_weights(w, DType::Q8_0).to_bytes();
  const std::vector<uint8_t> q4 = convert_weights(w, DType::Q4_0).to_bytes();
  ASSERT_EQ(q8.size(), static_cast<size_t>(rows * cols / 32 * 34));
  ASSERT_EQ(q4.size(), static_cast<size_t>(rows * cols / 32 * 18));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float* xb = x.data() + b * 32;
    float amax = 0, m = 0;
    for (int i = 0; i < 32; ++i)
      if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), m = xb[i];
    // Q8_0
    const float d8 = amax / 127.0f;
    uint16_t h;
    std::memcpy(&h, q8.data() + b * 34, 2);
    EXPECT_EQ(h, io::f32_to_f16_bits(d8)) << "block " << b;
    for (int i = 0; i < 32; ++i) {
      const int want = d8 == 0.0f ? 0 : static_cast<int>(std::round(xb[i] * (1.0f / d8)));
      EXPECT_EQ(static_cast<int8_t>(q8[b * 34 + 2 + i]), want) << "block " << b << " i " << i;
    }
    // Q4_0
    const float d4 = m / -8.0f;
    std::memcpy(&h, q4.data() + b * 18, 2);
    EXPECT_EQ(h, io::f32_to_f16_bits(d4)) << "block " << b;
    for (int i = 0; i < 32; ++i) {
      const float id = d4 == 0.0f ? 0.0f : 1.0f / d4;
      const int want = std::min(15, static_cast<int>(xb[i] * id + 8.5f));
      const uint8_t byte = q4[b * 18 + 2 + i % 16];
      EXPECT_EQ(i < 16 ? byte & 0x0F : byte >> 4, want) << "block " << b << " i " << i;
    }
  }
  // widen_weights gives d * q back; each value within half a step of the original (Q4_0:
  // a whole step for values of the extreme's opposite sign, which -8..7 cannot mirror).
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    const std::vector<float> back = widen_weights(convert_weights(w, t)).to_vector<float>();
    for (size_t i = 0; i < x.size(); ++i) {
      float amax = 0;
      for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j)
        amax = std::max(amax, std::fabs(x[j]));
      const float step = t == DType::Q8_0 ? amax / 127.0f : amax / 8.0f;
      const float bound = (t == DType::Q8_0 ? 0.5f : 1.0f) * step * 1.01f + 1e-9f;
      EXPECT_LE(std::fabs(back[i] - x[i]), bound) << dtype_name(t) << " " << i;
    }
  }
}

TEST(Quantize, BadInputsAreRefused) {
  const Tensor w = Tensor::zeros({2, 48});
  EXPECT_THROW((void)convert_weights(w, DType::Q8_0), Error);  // 48 is not whole blocks
  try {
    (void)convert_weights(w, DType::Q4_0);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Shape);
    EXPECT_NE(std::string(e.what()).find("whole blocks of 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)convert_weights(w, DType::U32), Error);
  EXPECT_THROW(
      (void)convert_weights(Tensor::from_vector(std::vector<uint32_t>{1}, {1}), DType::F16), Error);
  EXPECT_THROW((void)widen_weights(Tensor::from_vector(std::vector<uint32_t>{1}, {1})), Error);
}

}  // namespace
}  // namespace forge::test
