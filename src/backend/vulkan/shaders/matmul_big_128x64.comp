#version 450
#extension GL_GOOGLE_include_directive : require
// The large-shape matmul, 128x64 output tiles (rows x columns; 8x4 outputs per invocation,
// 12 KiB of shared memory): matmul_big_64x128 the other way round, for outputs whose columns
// fit 64-wide tiles better than their rows fit 64-high ones. The kernel is matmul_big.glsl.
#define BM 128u
#define BN 64u
#include "matmul_big.glsl"
