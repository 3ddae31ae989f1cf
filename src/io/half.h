// Exact widening of IEEE binary16 (F16) and bfloat16 (BF16) to binary32. Every 16-bit
// value has an exact f32 counterpart (subnormals and infinities included). F16 NaNs keep sign
// and payload and come out quiet, as IEEE 754 conversion, x86 F16C and PyTorch do; BF16 is
// the top half of an f32, so its NaNs are kept bit for bit (PyTorch does the same).
#pragma once

#include <cstdint>
#include "core/bit_cast.h"

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

/// f32 -> f16 bits, rounded to nearest even (IEEE 754, as F16C's vcvtps2ph with mode 0):
/// overflow gives infinity, tiny values round to subnormals or zero, NaN stays NaN (quiet,
/// sign and the payload's top bits kept).
inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = forge::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xffu;
  const uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return sign | (mant ? static_cast<uint16_t>(0x7e00u | (mant >> 13)) : 0x7c00u);
  const int32_t e = static_cast<int32_t>(exp) - 127 + 15;  // the f16 exponent
  if (e >= 0x1f) return sign | 0x7c00u;                    // too large: infinity
  if (e <= 0) {
    // Subnormal (or zero): value = m * 2^(e - 25) with the implicit bit made explicit.
    if (e < -10) return sign;  // below half the smallest subnormal: rounds to zero
    const uint32_t m = mant | 0x800000u;
    const int shift = 14 - e;  // bits dropped
    uint32_t h = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return sign | static_cast<uint16_t>(h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
  return sign | static_cast<uint16_t>(h);                    // (up to infinity: still right)
}

/// f32 -> bf16 bits, rounded to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = forge::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float f16_to_f32(uint16_t h) { return forge::bit_cast<float>(f16_to_f32_bits(h)); }
inline float bf16_to_f32(uint16_t b) { return forge::bit_cast<float>(bf16_to_f32_bits(b)); }

}  // namespace forge::io
