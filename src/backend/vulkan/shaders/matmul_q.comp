#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// out = op(a) @ W^T with a q8_0 / q4_0 weight W [N, K], for more rows than gemv_q takes
// (prefill), from the activation blocks of quantize_rows_q8 (binding 0). 64 x 64 output
// tiles, 256 invocations of 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j). Per block of
// 32 k, the workgroup stages 64 activation blocks and 64 weight blocks as int8 words (q4_0
// nibbles minus 8 repacked to int8) with their scales (4.6 KiB), then each invocation
// forms its 16 exact integer dot products and adds (dw * d) * dot in f32.
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer A { uint qa[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer O { float o[]; };  // read too with accumulate
#include "weight_matmul.glsl"
#include "weights.glsl"

const uint kT = 64u;
shared uint aq[kT][9];  // [row][word], padded
shared uint wq[kT][9];
shared float ad[kT], wd[kT];

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint t = ty * 16u + tx;
  const uint n0 = gl_WorkGroupID.x * kT, r0 = gl_WorkGroupID.y * kT;
  const bool q4 = (p.flags & kVariant) != 0u;
  const uint kb = p.K / 32u, bb = q4 ? 18u : 34u, kw = p.K / 4u;
  const uint dbase = p.oa + p.rows * kw;
  const uint wrow0 = 4u * p.ow + p.wbyte;
  float acc[4][4];
  [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;
  for (uint jb = 0u; jb < kb; ++jb) {
    // Activations: 64 rows x 8 words, 2 per invocation; the scales by the first 64.
    [[unroll]] for (uint q = 0u; q < 2u; ++q) {
      const uint e = t + 256u * q, rr = e / 8u, i = e % 8u, r = r0 + rr;
      aq[rr][i] = r < p.rows ? qa[p.oa + r * kw + 8u * jb + i] : 0u;
    }
    if (t < kT) ad[t] = r0 + t < p.rows ? uintBitsToFloat(qa[dbase + (r0 + t) * kb + jb]) : 0.0;
    // Weights: 4 invocations per block, each 2 of its 8 int8 words (and the first its scale).
    {
      const uint wn = t / 4u, part = t % 4u, n = n0 + wn;
      uint x0 = 0u, x1 = 0u;
      float dw = 0.0;
      if (n < p.N) {
        const uint blk = wrow0 + (n * kb + jb) * bb;
        if (q4) {
          const uint nib = w_word(blk + 2u + 4u * part);
          x0 = nibbles_i8(nib, false);  // elements 4 part ..
          x1 = nibbles_i8(nib, true);   // elements 16 + 4 part ..
        } else {
          x0 = w_word(blk + 2u + 8u * part);
          x1 = w_word(blk + 6u + 8u * part);
        }
        if (part == 0u) dw = unpackHalf2x16(w_half(blk)).x;
      }
      if (q4) {
        wq[wn][part] = x0;
        wq[wn][4u + part] = x1;
      } else {
        wq[wn][2u * part] = x0;
        wq[wn][2u * part + 1u] = x1;
      }
      if (part == 0u) wd[wn] = dw;
    }
    barrier();
    int dots[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j) dots[i][j] = 0;
    [[unroll]] for (uint g = 0u; g < 8u; ++g) {
      uint av[4], wv[4];
      [[unroll]] for (uint i = 0u; i < 4u; ++i) av[i] = aq[ty + 16u * i][g];
      [[unroll]] for (uint j = 0u; j < 4u; ++j) wv[j] = wq[tx + 16u * j][g];
      [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j) dots[i][j] += dot4_i8(av[i], wv[j]);
    }
    [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j)
      acc[i][j] += (wd[tx + 16u * j] * ad[ty + 16u * i]) * float(dots[i][j]);
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < 4u; ++i)[[unroll]] for (uint j = 0u; j < 4u; ++j) {
    const uint r = r0 + ty + 16u * i, n = n0 + tx + 16u * j;
    if (r < p.rows && n < p.N) store(r, n, acc[i][j]);
  }
}
