// AdamW update, in place, grid-stride over n elements (block 256).
// p, g, m, v: [n]. The constants are formed once on the host (forge/adamw_step.h):
//   m' = beta1 m + (1 - beta1) g;  v' = beta2 v + (1 - beta2) g g
//   p' = p decay - step_size m' / (sqrt(v') / bc2_sqrt + eps)
// The CPU computes this in this exact order with no FMA contraction (adamw_loop in
// src/backend/cpu/span_loops.h, and the AVX-512 version, which spells out separate mul and
// add). NVRTC contracts a * b + c into an FMA by default, so every step is written with the
// round-to-nearest intrinsics, which are never fused: the result is bit-identical to the CPU.

extern "C" __global__ void forge_adamw(float* p, const float* g, float* m, float* v, i64 n,
                                       float decay, float beta1, float one_minus_beta1,
                                       float beta2, float one_minus_beta2, float step_size,
                                       float bc2_sqrt, float eps) {
  FORGE_GRID_STRIDE(i, n) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(one_minus_beta1, gi));
    const float vi =
        __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(one_minus_beta2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
  }
}
