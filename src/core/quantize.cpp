// Weight dtype conversions (forge/quantize.h), on the host: the bytes are computed there and
// uploaded to the weight's device.
#include "forge/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "forge/error.h"
#include "io/half.h"

namespace forge {
namespace {

constexpr int64_t kBlock = 32;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = io::f32_to_f16_bits(v);
  std::memcpy(p, &h, 2);
}

float get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return io::f16_to_f32(h);
}

// One block of 32 values as Q8_0 (34 bytes).
void block_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  for (int64_t i = 0; i < kBlock; ++i) {
    const float v = std::round(x[i] * id);
    out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f)));
  }
}

// One block of 32 values as Q4_0 (18 bytes).
void block_q4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, m = 0.0f;
  for (int64_t i = 0; i < kBlock; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  const float d = m / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  const auto nibble = [&](float v) {
    const float t = std::clamp(v * id + 8.5f, 0.0f, 15.0f);  // NaN-free inputs: in [0.5, 16.5]
    return static_cast<uint8_t>(t);                          // trunc, then min(15, .)
  };
  for (int64_t i = 0; i < 16; ++i)
    out[2 + i] = static_cast<uint8_t>(nibble(x[i]) | (nibble(x[i + 16]) << 4));
}

}  // namespace

Tensor convert_weights(const Tensor& w, DType dtype) {
  const char* fn = "convert_weights";
  if (!w.defined()) throw Error(ErrorKind::DType, std::string(fn) + ": w is undefined");
  if (w.dtype() != DType::F32)
    throw Error(ErrorKind::DType, std::string(fn) + ": w must be f32, got " + w.str());
  if (dtype == DType::U32)
    throw Error(ErrorKind::DType, std::string(fn) + ": u32 is not a weight dtype");
  if (dtype == DType::F32) return w.clone();
  const int64_t cols = w.rank() == 0 ? 1 : w.dim(-1);
  if (dtype_is_block(dtype) && cols % kBlock != 0)
    throw Error(ErrorKind::Shape, std::string(fn) + ": " + dtype_name(dtype) +
                                      " needs a last dimension of whole blocks of 32, got " +
                                      w.shape().str());
  const std::vector<float> x = w.to_vector<float>();
  std::vector<uint8_t> out(dtype_bytes(dtype, w.numel()));
  switch (dtype) {
    case DType::F16:
      for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t h = io::f32_to_f16_bits(x[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::BF16:
      for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t h = io::f32_to_bf16_bits(x[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    default: {
      const size_t bytes = dtype_block_bytes(dtype);
      for (size_t b = 0; b * kBlock < x.size(); ++b)
        (dtype == DType::Q8_0 ? block_q8_0 : block_q4_0)(x.data() + b * kBlock,
                                                         out.data() + b * bytes);
    }
  }
  return Tensor::from_bytes(out.data(), out.size(), w.shape(), dtype, w.device());
}

DType weight_dtype_named(const std::string& name) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0})
    if (name == dtype_name(d)) return d;
  throw Error(ErrorKind::Format,
              "unknown weight dtype '" + name + "' (expected f32, f16, bf16, q8_0 or q4_0)");
}

Tensor widen_weights(const Tensor& w) {
  const char* fn = "widen_weights";
  if (!w.defined()) throw Error(ErrorKind::DType, std::string(fn) + ": w is undefined");
  if (w.dtype() == DType::U32)
    throw Error(ErrorKind::DType, std::string(fn) + ": u32 is not a weight dtype");
  if (w.dtype() == DType::F32) return w.clone();
  const std::vector<uint8_t> in = w.to_bytes();
  std::vector<float> x(static_cast<size_t>(w.numel()));
  for (size_t i = 0; i < x.size(); ++i) {
    switch (w.dtype()) {
      case DType::F16: x[i] = get_f16(in.data() + 2 * i); break;
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, in.data() + 2 * i, 2);
        x[i] = io::bf16_to_f32(h);
        break;
      }
      case DType::Q8_0: {
        const uint8_t* blk = in.data() + (i / kBlock) * 34;
        x[i] = get_f16(blk) * static_cast<float>(static_cast<int8_t>(blk[2 + i % kBlock]));
        break;
      }
      default: {
        const uint8_t* blk = in.data() + (i / kBlock) * 18;
        const size_t j = i % kBlock;
        const int q = j < 16 ? (blk[2 + j] & 0x0F) : (blk[2 + j - 16] >> 4);
        x[i] = get_f16(blk) * static_cast<float>(q - 8);
      }
    }
  }
  return Tensor::from_vector(x, w.shape(), w.device());
}

}  // namespace forge
