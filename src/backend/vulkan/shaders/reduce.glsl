// Workgroup reductions over 256 invocations (one workgroup per row). Every invocation must
// call them (they contain barriers); every invocation gets the result. A fixed tree: the
// result does not depend on timing.
#ifndef FORGE_REDUCE_GLSL
#define FORGE_REDUCE_GLSL

shared float red_buf[256];

#define FORGE_WG_REDUCE(NAME, COMBINE)                          \
  float NAME(float v) {                                         \
    const uint l = gl_LocalInvocationID.x;                      \
    barrier();                                                  \
    red_buf[l] = v;                                             \
    barrier();                                                  \
    for (uint s = 128u; s > 0u; s >>= 1) {                      \
      if (l < s) red_buf[l] = COMBINE(red_buf[l], red_buf[l + s]); \
      barrier();                                                \
    }                                                           \
    return red_buf[0];                                          \
  }

float add2(float a, float b) { return a + b; }
FORGE_WG_REDUCE(wg_sum, add2)
FORGE_WG_REDUCE(wg_max, max)

#endif
