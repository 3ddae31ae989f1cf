#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention prefill for 64 < hd <= 128: 16x16 invocations, each 2 queries x 1 key
// (scores) and 2 queries x 8 dimensions (P V); 32 queries per workgroup, keys 16 at a time
// (shared: Q 16 KiB + K/P 8 KiB + V 8 KiB). The kernel is attention_prefill.glsl.
#define HD 128u
#define WX 16u
#define WY 16u
#define RI 2u
#define KJ 1u
#define DC 8u
#define VW 1u
#include "attention_prefill.glsl"
