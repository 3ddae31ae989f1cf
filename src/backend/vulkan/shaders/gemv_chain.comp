#version 450
#extension GL_GOOGLE_include_directive : require
// matmul_add_layernorm_matmul of one row in one dispatch: gemv_chain.glsl.
#include "gemv_chain.glsl"
