// Workgroup reductions over 256 invocations (one workgroup per row). Every invocation must
// call them (they contain barriers); every invocation gets the result. A fixed order: the
// result does not depend on timing. Three barriers, not a log2(256) = 8-level tree with a
// barrier per level: 16 invocations each combine 16 consecutive values, then every
// invocation combines the 16 partials itself (a decode step runs ~50 reductions of one row,
// each paying for its barriers).
#ifndef FORGE_REDUCE_GLSL
#define FORGE_REDUCE_GLSL

shared float red_buf[256];
shared float red_part[16];

#define FORGE_WG_REDUCE(NAME, COMBINE)                   \
  float NAME(float v) {                                  \
    const uint l = gl_LocalInvocationID.x;               \
    barrier();                                           \
    red_buf[l] = v;                                      \
    barrier();                                           \
    if (l < 16u) {                                       \
      float s = red_buf[l * 16u];                        \
      for (uint i = 1u; i < 16u; ++i) s = COMBINE(s, red_buf[l * 16u + i]); \
      red_part[l] = s;                                   \
    }                                                    \
    barrier();                                           \
    float r = red_part[0];                               \
    for (uint i = 1u; i < 16u; ++i) r = COMBINE(r, red_part[i]); \
    return r;                                            \
  }

float add2(float a, float b) { return a + b; }
FORGE_WG_REDUCE(wg_sum, add2)
FORGE_WG_REDUCE(wg_max, max)

#endif
