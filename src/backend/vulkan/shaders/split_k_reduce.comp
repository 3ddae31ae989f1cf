#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// The second pass of a split-k product (gemv_n.comp or matmul_big.comp with flags & 64):
// out[r, n] = alpha * sum over splits s, in order, of part[r, s, n] + bias[n], for each row r
// (a GEMV's batch index, a matmul's output row; out rows stride_c apart). One invocation per
// (r, n).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 1) readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint opart, obias, oo;
  uint total, N, splits, stride_c, has_bias;
  float alpha;
} p;

void main() {
  const uint i = flat_index();
  if (i >= p.total) return;
  const uint batch = i / p.N, n = i % p.N;
  float s = 0.0;
  for (uint j = 0u; j < p.splits; ++j) s += part[p.opart + (batch * p.splits + j) * p.N + n];
  float v = p.alpha * s;
  if (p.has_bias != 0u) v += bias[p.obias + n];
  o[p.oo + batch * p.stride_c + n] = v;
}
