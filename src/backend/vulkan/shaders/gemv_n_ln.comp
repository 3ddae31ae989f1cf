#version 450
#extension GL_GOOGLE_include_directive : require
// layernorm(x) @ W for M = 1, b stored [K, N], K <= 2048: gemv_n.glsl with GEMV_LN.
#define GEMV_LN
#include "gemv_n.glsl"
