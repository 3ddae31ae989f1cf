#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Matrix-vector product with an f16 / bf16 weight W [N, K] used transposed (decode: a few
// rows r of a, one per workgroup z). Bound by reading W: a workgroup owns 8 rows of W, the
// 32 invocations of a row stride along it (coalesced) with 16-byte loads (8 weights; up to
// kSteps of them in flight per invocation: a row of 768 is 96 loads, one step), widen them
// to f32 and multiply in f32; then a fixed tree adds the 32 partials (deterministic). The
// same bytes per row as gemv_t reads in f32 take half the loads. Rows not 16-byte aligned
// (K not a multiple of 8, a misaligned view) or a strided op(a) row go element by element.
// (Its H200 figures: docs/PERFORMANCE.md, "Measurements that shaped the kernels".)
const uint kRows = 1u, kGroups = 8u;  // rows of W per group of 32 invocations; groups
layout(local_size_x = 32, local_size_y = 8) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 w4[]; };  // the same binding
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer O { float o[]; };  // read too with accumulate
#include "weight_matmul.glsl"
#include "weights.glsl"
#include "widen16.glsl"

const uint kSteps = 8u;  // 16-byte loads in flight per invocation (per row)

shared float part[8][33];

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint r = gl_WorkGroupID.z;
  const bool bf16 = (p.flags & kVariant) != 0u;
  const uint a0 = a_index(r, 0u);
  const bool a_unit = (p.flags & kTransA) == 0u || p.lda == 1u;  // op(a) rows contiguous
  const uint n0 = (gl_WorkGroupID.x * kGroups + ly) * kRows;  // this group's first row of W
  float acc[kRows];
  [[unroll]] for (uint i = 0u; i < kRows; ++i) acc[i] = 0.0;
  const uint base = 4u * p.ow + p.wbyte;  // byte address of W's row 0
  // Byte address of the group's first row; rows are 2K bytes apart.
  const uint row0 = base + n0 * 2u * p.K;
  if (row0 % 16u == 0u && p.K % 8u == 0u && a_unit && a0 % 4u == 0u) {
    // Weights [0, K) as 16-byte groups of 8: invocation lx takes groups lx, lx + 32, ... of
    // each of its rows, issuing kSteps loads per row before using any.
    const uint K8 = p.K / 8u, a40 = a0 / 4u;
    vec4 acc4[kRows];
    [[unroll]] for (uint i = 0u; i < kRows; ++i) acc4[i] = vec4(0.0);
    for (uint j0 = lx; j0 < K8; j0 += 32u * kSteps) {
      uvec4 wv[kRows][kSteps];
      [[unroll]] for (uint i = 0u; i < kRows; ++i)[[unroll]] for (uint u = 0u; u < kSteps; ++u) {
        const uint j = j0 + 32u * u;
        wv[i][u] = j < K8 && n0 + i < p.N ? w4[row0 / 16u + i * K8 + j] : uvec4(0u);
      }
      [[unroll]] for (uint u = 0u; u < kSteps; ++u) {
        const uint j = j0 + 32u * u;
        if (j < K8) {
          const vec4 x0 = a4[a40 + 2u * j], x1 = a4[a40 + 2u * j + 1u];
          [[unroll]] for (uint i = 0u; i < kRows; ++i) {
            vec4 lo, hi;
            widen8(wv[i][u], bf16, lo, hi);
            acc4[i] += x0 * lo + x1 * hi;
          }
        }
      }
    }
    [[unroll]] for (uint i = 0u; i < kRows; ++i)
      acc[i] = (acc4[i].x + acc4[i].y) + (acc4[i].z + acc4[i].w);
  } else {
    [[unroll]] for (uint i = 0u; i < kRows; ++i)
      if (n0 + i < p.N)
        for (uint k = lx; k < p.K; k += 32u)
          acc[i] += a[a_index(r, k)] * widen16(w_half(row0 + i * 2u * p.K + 2u * k), bf16);
  }
  // The 32 partials of each row added as a fixed tree (deterministic; no invocation adds
  // all 32 alone).
  [[unroll]] for (uint i = 0u; i < kRows; ++i) part[ly * kRows + i][lx] = acc[i];
  barrier();
  [[unroll]] for (uint s = 16u; s > 0u; s >>= 1u) {
    if (lx < s)[[unroll]] for (uint i = 0u; i < kRows; ++i)
      part[ly * kRows + i][lx] += part[ly * kRows + i][lx + s];
    barrier();
  }
  if (lx < kRows && n0 + lx < p.N) store(r, n0 + lx, part[ly * kRows + lx][0]);
}
