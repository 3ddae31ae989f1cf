#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention prefill for hd <= 64, the 32 KiB tile for every device: 16x16
// invocations, each 4 queries x 2 keys (scores) and 4 queries x 4 dimensions (P V); 64
// queries per workgroup, keys 32 at a time (shared: Q 16 KiB + K/P 8 KiB + V 8 KiB). The
// kernel is attention_prefill.glsl.
#define HD 64u
#define WX 16u
#define WY 16u
#define RI 4u
#define KJ 2u
#define DC 4u
#define VW 1u
#include "attention_prefill.glsl"
