#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// out[i, c] = table[ids[i] - row_begin, c] widened to f32, for a table stored in f16, bf16,
// q8_0 or q4_0 (kind 0..3; d * q is exact in f32) and the ids inside this window of its rows
// (vrows rows from row_begin on, each row_bytes long from byte 4 * ot + tbyte); other rows
// of out untouched. One invocation per element of out.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint ids[]; };
layout(std430, binding = 1) readonly buffer T { uint w[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint oi, ot, oo, n, cols, vrows, row_begin, row_bytes, tbyte, kind; } p;
#include "weights.glsl"

void main() {
  const uint e = flat_index();
  if (e >= p.n * p.cols) return;
  const uint i = e / p.cols, c = e % p.cols;
  const uint id = ids[p.oi + i];
  if (id < p.row_begin || id - p.row_begin >= p.vrows) return;
  const uint row = 4u * p.ot + p.tbyte + (id - p.row_begin) * p.row_bytes;
  float v;
  if (p.kind <= 1u) {
    v = widen16(w_half(row + 2u * c), p.kind == 1u);
  } else {
    const uint j = c % 32u, blk = row + (c / 32u) * (p.kind == 2u ? 34u : 18u);
    const float d = unpackHalf2x16(w_half(blk)).x;
    int q;
    if (p.kind == 2u) {
      const uint byte = blk + 2u + j;
      q = bitfieldExtract(int(w[byte >> 2u]), int((byte & 3u) * 8u), 8);
    } else {
      const uint byte = blk + 2u + j % 16u;
      const uint x = (w[byte >> 2u] >> ((byte & 3u) * 8u)) & 0xFFu;
      q = int(j < 16u ? x & 0xFu : x >> 4u) - 8;
    }
    v = d * float(q);
  }
  o[p.oo + e] = v;
}
