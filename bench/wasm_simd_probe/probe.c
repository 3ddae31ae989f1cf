// Peak f32 arithmetic of wasm SIMD128 on this machine's engine: 12 independent chains of
// acc = acc * m + a (f32x4.mul then f32x4.add: SIMD128 has no fused multiply-add), 8 flops a
// chain and iteration. Built by build.sh into probe.wasm (no imports); probe.mjs times it in
// Chromium and node. Read the disassembly (build.sh writes probe.wat) to see that the loop is
// the 24 vector operations and nothing else.
#include <wasm_simd128.h>

#define CHAINS 12

__attribute__((export_name("probe"))) float probe(int iterations) {
  v128_t acc[CHAINS];
  for (int c = 0; c < CHAINS; c++) acc[c] = wasm_f32x4_splat(1.0f + 0.001f * (float)c);
  const v128_t m = wasm_f32x4_splat(0.999999f), a = wasm_f32x4_splat(1e-7f);
  for (int i = 0; i < iterations; i++) {
#pragma clang loop unroll(full)
    for (int c = 0; c < CHAINS; c++) acc[c] = wasm_f32x4_add(wasm_f32x4_mul(acc[c], m), a);
  }
  v128_t s = acc[0];
  for (int c = 1; c < CHAINS; c++) s = wasm_f32x4_add(s, acc[c]);
  return wasm_f32x4_extract_lane(s, 0);
}

__attribute__((export_name("flops_per_iteration"))) int flops_per_iteration(void) {
  return CHAINS * 4 * 2;
}
