// The epilogue of the matmul shaders (matmul, matmul_big, gemv_n, gemv_t, split_k_reduce),
// after alpha and the bias: push-constant flag 8 applies the tanh GELU, flag 16 adds the
// value to what o[i] holds (matmul_add_; o is then bound read-write). The including shader
// declares the buffer `o` and the push constants `p` with a `flags` member first.
#ifndef FORGE_MATMUL_EPILOGUE_GLSL
#define FORGE_MATMUL_EPILOGUE_GLSL
#include "gelu.glsl"

const uint kFlagGelu = 8u;
const uint kFlagAccumulate = 16u;

// v: alpha * sum + bias of output element i (an index into o).
float epilogue(float v, uint i) {
  if ((p.flags & kFlagGelu) != 0u) v = gelu_tanh(v);
  if ((p.flags & kFlagAccumulate) != 0u) v += o[i];
  return v;
}

#endif
