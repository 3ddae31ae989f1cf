// Exact widening of IEEE binary16 (F16) and bfloat16 (BF16) to binary32. Every 16-bit
// value has an exact f32 counterpart (subnormals and infinities included). F16 NaNs keep sign
// and payload and come out quiet, as IEEE 754 conversion, x86 F16C and PyTorch do; BF16 is
// the top half of an f32, so its NaNs are kept bit for bit (PyTorch does the same).
#pragma once

#include <bit>
#include <cstdint>

namespace forge::io {

/// f16 bits -> f32 bits.
inline uint32_t f16_to_f32_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {
    if (mant == 0) return sign | 0x7f800000u;  // infinity
    return sign | 0x7fc00000u | (mant << 13);  // NaN: payload kept, quiet bit set
  }
  if (exp != 0) return sign | ((exp + 127 - 15) << 23) | (mant << 13);
  if (mant == 0) return sign;  // +-0
  // Subnormal: value = mant * 2^-24. Shift the leading one up to bit 10 (the implicit bit);
  // each shift lowers the exponent by one, starting from the smallest normal's (-14).
  int32_t e = -14;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return sign | (static_cast<uint32_t>(e + 127) << 23) | ((mant & 0x3ffu) << 13);
}

/// bf16 bits -> f32 bits: bf16 is the top half of an f32.
inline uint32_t bf16_to_f32_bits(uint16_t b) { return static_cast<uint32_t>(b) << 16; }

inline float f16_to_f32(uint16_t h) { return std::bit_cast<float>(f16_to_f32_bits(h)); }
inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(bf16_to_f32_bits(b)); }

}  // namespace forge::io
