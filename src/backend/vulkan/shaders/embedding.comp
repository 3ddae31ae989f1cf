#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// out[i, c] = table[ids[i] - row_begin, c] for the ids inside this window of the table
// (vrows rows from row_begin on); other rows of out untouched.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint ids[]; };
layout(std430, binding = 1) readonly buffer T { float table[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint oi, ot, oo, n, cols, vrows, row_begin; } p;
void main() {
  const uint e = flat_index();
  if (e >= p.n * p.cols) return;
  const uint i = e / p.cols, c = e % p.cols;
  const uint id = ids[p.oi + i];
  if (id < p.row_begin || id - p.row_begin >= p.vrows) return;
  o[p.oo + e] = table[p.ot + (id - p.row_begin) * p.cols + c];
}
