// Workgroup reductions over 256 invocations (one workgroup per row). Every invocation must
// call them (they contain barriers); every invocation gets the result.
#ifndef FORGE_REDUCE_GLSL
#define FORGE_REDUCE_GLSL

shared float red_buf[256];

float wg_sum(float v) {
  const uint l = gl_LocalInvocationID.x;
  barrier();
  red_buf[l] = v;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (l < s) red_buf[l] += red_buf[l + s];
    barrier();
  }
  return red_buf[0];
}

float wg_max(float v) {
  const uint l = gl_LocalInvocationID.x;
  barrier();
  red_buf[l] = v;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (l < s) red_buf[l] = max(red_buf[l], red_buf[l + s]);
    barrier();
  }
  return red_buf[0];
}

#endif
