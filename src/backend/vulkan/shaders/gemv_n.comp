#version 450
#extension GL_GOOGLE_include_directive : require
// x @ W for M = 1, b stored [K, N]: gemv_n.glsl.
#include "gemv_n.glsl"
