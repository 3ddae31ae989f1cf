// Reading weights stored in f16, bf16, q8_0 and q4_0 (forge/dtype.h) from a binding of
// uints `w[]` that the including shader declares. Rows of these dtypes start at any even
// byte (a q8_0 block is 34 bytes, a q4_0 block 18, an f16 row of odd K 2K bytes), so every
// read is by byte address, two-byte aligned: no 8/16-bit storage feature is needed.
#ifndef FORGE_WEIGHTS_GLSL
#define FORGE_WEIGHTS_GLSL

// The 16 bits at even byte address `byte`.
uint w_half(uint byte) { return (w[byte >> 2u] >> ((byte & 2u) * 8u)) & 0xFFFFu; }

// The 32 bits (little-endian) at even byte address `byte`: one word, or the halves of two.
uint w_word(uint byte) {
  const uint i = byte >> 2u;
  return (byte & 2u) == 0u ? w[i] : (w[i] >> 16u) | (w[i + 1u] << 16u);
}

// An f16 or bf16 value's bits widened to f32 (both exactly).
float widen16(uint h, bool bf16) {
  return bf16 ? uintBitsToFloat(h << 16u) : unpackHalf2x16(h).x;
}

// sum over the 4 bytes of x and y as signed int8s: exact.
int dot4_i8(uint x, uint y) {
  int s = 0;
  [[unroll]] for (int b = 0; b < 32; b += 8)
    s += bitfieldExtract(int(x), b, 8) * bitfieldExtract(int(y), b, 8);
  return s;
}

// A q4_0 word of 8 nibbles' 4 low (hi = false) or high nibbles, each minus 8, as the 4
// signed bytes of a word (the int8 layout dot4_i8 takes).
uint nibbles_i8(uint x, bool hi) {
  const uint n = (hi ? x >> 4u : x) & 0x0F0F0F0Fu;  // 4 nibbles in 0..15
  // n - 8 per byte without borrows: (n + 0x78) ^ 0x80 per byte gives the two's-complement
  // byte of n - 8 (n + 0x78 <= 0x87 never carries into the next byte).
  return (n + 0x78787878u) ^ 0x80808080u;
}

#endif
