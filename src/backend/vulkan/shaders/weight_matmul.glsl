// What the weight-matmul shaders (gemv_w16, matmul_w16, gemv_q, matmul_q) share: out rows
// r = [B, M] flattened (r = b * M + m) times a weight W [N, K] stored in a 16-bit or block
// dtype, used transposed, over the window of W's rows n0 .. n0 + N (of ldc output columns).
// The including shader declares bindings 0 (a), 1 (w: uints), 2 (bias) and 3 (o) first.
#ifndef FORGE_WEIGHT_MATMUL_GLSL
#define FORGE_WEIGHT_MATMUL_GLSL

layout(push_constant) uniform P {
  uint oa, ow, obias, oo;  // element offsets of the bindings (common.glsl)
  uint M, N, K;            // a's rows per batch, W's rows in this window, k
  uint lda, stride_a;      // a's leading dimension and batch stride (0: shared)
  uint ldc, n0;            // out's row length, this window's first column
  uint wbyte;              // W's first byte is at 4 * ow + wbyte (0 or 2)
  uint flags;              // 1: trans_a, 2: bf16 / q4_0, 4: bias, 8: gelu, 16: accumulate
  float alpha;
  uint rows;  // B * M
} p;
#include "matmul_epilogue.glsl"

const uint kTransA = 1u, kVariant = 2u, kBias = 4u;

// Element (r, k) of op(a), an f32 [B, M, K] (or [B, K, M] with trans_a), as an index of a.
uint a_index(uint r, uint k) {
  const uint b = r / p.M, m = r % p.M;
  const uint base = p.oa + b * p.stride_a;
  return (p.flags & kTransA) != 0u ? base + k * p.lda + m : base + m * p.lda + k;
}

// Writes out[r, n0 + n] = epilogue(alpha * s + bias[n0 + n]).
void store(uint r, uint n, float s) {
  float v = p.alpha * s;
  if ((p.flags & kBias) != 0u) v += bias[p.obias + p.n0 + n];
  const uint i = p.oo + r * p.ldc + p.n0 + n;
  o[i] = epilogue(v, i);
}

#endif
