// Portable C++ kernels of the quantized products (quant.h): the rounding and the block dot
// products, one value at a time.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/quant.h"
#include "io/half.h"

namespace forge::cpu::quant {
namespace {

void quantize(const float* x, int64_t K, int8_t* q, float* d, int32_t* s) {
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.0f;
    for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float db = amax / 127.0f;
    const float id = db > 0.0f ? 1.0f / db : 0.0f;
    int32_t sum = 0;
    for (int64_t i = 0; i < kBlock; ++i) {
      float v = std::nearbyint(xb[i] * id);  // the default rounding: half to even
      if (!(v >= -127.0f)) v = -127.0f;      // NaN too (as the vector kernels clamp it)
      if (v > 127.0f) v = 127.0f;
      const int8_t qi = static_cast<int8_t>(v);
      q[b * kBlock + i] = qi;
      sum += qi;
    }
    d[b] = db;
    s[b] = sum;
  }
}

float scale_of(const std::byte* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return io::f16_to_f32(h);
}

template <WeightType kType>
int32_t block_dot(const int8_t* qa, const std::byte* wb) {
  int32_t sum = 0;
  const auto* v = reinterpret_cast<const uint8_t*>(wb + 2);
  if constexpr (kType == kQ8_0) {
    for (int i = 0; i < kBlock; ++i) sum += qa[i] * static_cast<int8_t>(v[i]);
  } else {
    for (int i = 0; i < 16; ++i) {
      sum += qa[i] * ((v[i] & 0x0F) - 8);
      sum += qa[i + 16] * ((v[i] >> 4) - 8);
    }
  }
  return sum;
}

template <WeightType kType>
void dots(int m, const Rows& a, const std::byte* w, size_t row_bytes, int64_t j0, int64_t j1,
          float* c, int64_t ldc) {
  const size_t block_bytes = kType == kQ8_0 ? 34 : 18;
  for (int64_t j = j0; j < j1; ++j) {
    const std::byte* wj = w + static_cast<size_t>(j) * row_bytes;
    for (int r = 0; r < m; ++r) {
      const int8_t* qa = a.q + r * a.K;
      float acc = 0.0f;
      for (int64_t b = 0; b < a.kb; ++b) {
        const std::byte* wb = wj + static_cast<size_t>(b) * block_bytes;
        acc += scale_of(wb) * a.d[r * a.kb + b] *
               static_cast<float>(block_dot<kType>(qa + b * kBlock, wb));
      }
      c[r * ldc + j] = acc;
    }
  }
}

}  // namespace

void dequantize(DType type, const std::byte* src, int64_t n, float* dst) {
  const size_t bytes = type == DType::Q8_0 ? 34 : 18;
  for (int64_t b = 0; b < n / kBlock; ++b, src += bytes, dst += kBlock) {
    const float d = scale_of(src);
    const auto* v = reinterpret_cast<const uint8_t*>(src + 2);
    if (type == DType::Q8_0) {
      for (int i = 0; i < kBlock; ++i) dst[i] = d * static_cast<float>(static_cast<int8_t>(v[i]));
    } else {
      for (int i = 0; i < 16; ++i) {
        dst[i] = d * static_cast<float>((v[i] & 0x0F) - 8);
        dst[i + 16] = d * static_cast<float>((v[i] >> 4) - 8);
      }
    }
  }
}

const Kernels& kernels_portable() {
  static const Kernels k{"portable", quantize, {dots<kQ8_0>, dots<kQ4_0>}};
  return k;
}

}  // namespace forge::cpu::quant
