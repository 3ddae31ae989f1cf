#version 450
#extension GL_GOOGLE_include_directive : require
// The large-shape matmul, 64x128 output tiles (rows x columns; 4x8 outputs per invocation,
// 12 KiB of shared memory): twice matmul_big's workgroups where its grid is too small to
// fill the GPU (prefill's 1024 rows). The kernel is matmul_big.glsl.
#define BM 64u
#define BN 128u
#include "matmul_big.glsl"
