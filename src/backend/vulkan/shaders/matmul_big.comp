#version 450
#extension GL_GOOGLE_include_directive : require
// The large-shape matmul, 128x128 output tiles (8x8 outputs per invocation, 16 KiB of shared
// memory): the most arithmetic per shared-memory read, for grids that fill the GPU. The
// kernel is matmul_big.glsl.
#define BM 128u
#define BN 128u
#include "matmul_big.glsl"
