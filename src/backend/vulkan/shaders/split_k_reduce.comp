#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// The second pass of a split-k product (gemv_n.comp, matmul.comp or matmul_big.comp with
// flags & 64): out[r, n] = [out[r, n] +] [gelu](alpha * sum over splits s, in order, of
// part[r, s, n] + bias[n]) for each row r (a GEMV's batch index, a matmul's output row; out
// rows stride_c apart). flags as in matmul.comp: 4 bias, 8 gelu, 16 accumulate. One
// invocation per (r, n).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 1) readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) buffer O { float o[]; };  // read too with accumulate
layout(push_constant) uniform P {
  uint opart, obias, oo;
  uint total, N, splits, stride_c, flags;
  float alpha;
} p;
#include "matmul_epilogue.glsl"

void main() {
  const uint i = flat_index();
  if (i >= p.total) return;
  const uint batch = i / p.N, n = i % p.N;
  float s = 0.0;
  for (uint j = 0u; j < p.splits; ++j) s += part[p.opart + (batch * p.splits + j) * p.N + n];
  float v = p.alpha * s;
  if ((p.flags & 4u) != 0u) v += bias[p.obias + n];
  const uint oi = p.oo + batch * p.stride_c + n;
  o[oi] = epilogue(v, oi);
}
