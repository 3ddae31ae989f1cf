#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// The activations of a product with q8_0 / q4_0 weights rounded to int8 blocks, exactly as
// forge/ops.h documents (and the CPU does), for every block of 32 of op(a)'s rows r
// ([B, M] flattened; a is [B, M, K] or [B, K, M] with trans_a): one invocation per block,
//   amax = max |x_i|;  d = amax / 127;  id = d > 0 ? 1 / d : 0   (f32, correctly rounded)
//   q_i = clamp(roundEven(x_i * id), -127, 127)
// into the scratch q: the int8s of row r at words r * K / 4 .. (4 per word, little-endian),
// then from word rows * K / 4 on, the f32 scale d of each block (row-major [rows, K / 32]).
// GLSL's division need not be correctly rounded (NVIDIA's is not), so each quotient is
// fixed to the nearest f32 by comparing exact residuals in float64 (shaderFloat64).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P {
  uint oa, oq;
  uint M, K, lda, stride_a, flags, rows;  // flags 1: trans_a
} p;

// num / den rounded to the nearest f32 (num >= 0, den > 0, both finite), from an estimate
// within a few ulps: step to a neighbour while it leaves a smaller |num - c * den|. The
// residuals are exact in float64 (c * den has 48 bits; num is within a factor 2 of it), and
// no quotient of two f32s lies halfway between two f32s (it would need an odd significand
// of more than 24 bits times den's), so the nearest is unique.
float exact_quotient(float num, float den, float c) {
  if (num == 0.0 || isinf(c) || c == 0.0) return c;
  [[unroll]] for (int it = 0; it < 4; ++it) {
    const float lo = uintBitsToFloat(floatBitsToUint(c) - 1u);
    const float hi = uintBitsToFloat(floatBitsToUint(c) + 1u);
    precise const double rc = abs(double(num) - double(c) * double(den));
    precise const double rl = abs(double(num) - double(lo) * double(den));
    precise const double rh = abs(double(num) - double(hi) * double(den));
    if (rl < rc) c = lo;
    else if (rh < rc) c = hi;
  }
  return c;
}

void main() {
  const uint kb = p.K / 32u;
  const uint e = flat_index();
  if (e >= p.rows * kb) return;
  const uint r = e / kb, j = e % kb;
  const uint b = r / p.M, m = r % p.M;
  const uint base = p.oa + b * p.stride_a;
  const bool ta = (p.flags & 1u) != 0u;
  float x[32];
  float amax = 0.0;
  [[unroll]] for (uint i = 0u; i < 32u; ++i) {
    const uint k = 32u * j + i;
    x[i] = a[ta ? base + k * p.lda + m : base + m * p.lda + k];
    amax = max(amax, abs(x[i]));
  }
  const float d = exact_quotient(amax, 127.0, amax / 127.0);
  const float id = d > 0.0 ? exact_quotient(1.0, d, 1.0 / d) : 0.0;
  [[unroll]] for (uint g = 0u; g < 8u; ++g) {
    uint word = 0u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      precise const float s = x[4u * g + i] * id;
      const int v = int(clamp(roundEven(s), -127.0, 127.0));
      word |= (uint(v) & 0xFFu) << (8u * i);
    }
    q[p.oq + r * (p.K / 4u) + 8u * j + g] = word;
  }
  q[p.oq + p.rows * (p.K / 4u) + r * kb + j] = floatBitsToUint(d);
}
