#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention prefill for hd <= 64 with twice the register tile of attention_prefill:
// 8x16 invocations, each 4 queries x 4 keys (scores) and 4 queries x 8 dimensions (P V),
// its keys and dimensions in 16-byte runs of 4 (vector loads); 64 queries per workgroup,
// keys 32 at a time. Shared memory is still 32 KiB (Q 16 KiB + K/P 8 KiB + V 8 KiB), so it
// also runs (and is tested) on lavapipe. The kernel is attention_prefill.glsl.
#define HD 64u
#define WX 8u
#define WY 16u
#define RI 4u
#define KJ 4u
#define DC 8u
#define VW 4u
#include "attention_prefill.glsl"
