#version 450
#extension GL_GOOGLE_include_directive : require
// gemv_chain.glsl for rows short enough (N1 <= kChainPreloadMaxRow, kernels.cpp) that a
// phase-2 invocation holds all of its values of W2 in registers: loaded before its wait.
#define CHAIN_PRELOAD_W2
#include "gemv_chain.glsl"
