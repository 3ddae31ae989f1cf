// 16-bit weights widened to f32 in registers, 8 at a time (gemv_w16, gemv_chain_w16).
#ifndef FORGE_WIDEN16_GLSL
#define FORGE_WIDEN16_GLSL

// The 8 f16 (bf16 false) or bf16 weights of one 16-byte load, widened exactly: lo holds the
// first 4, hi the last 4, in memory order.
void widen8(uvec4 q, bool bf16, out vec4 lo, out vec4 hi) {
  if (bf16) {
    lo = uintBitsToFloat(uvec4(q.x << 16u, q.x & 0xFFFF0000u, q.y << 16u, q.y & 0xFFFF0000u));
    hi = uintBitsToFloat(uvec4(q.z << 16u, q.z & 0xFFFF0000u, q.w << 16u, q.w & 0xFFFF0000u));
  } else {
    lo = vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y));
    hi = vec4(unpackHalf2x16(q.z), unpackHalf2x16(q.w));
  }
}

#endif
