#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention prefill for 64 < hd <= 128: 32 queries per workgroup, keys 16 at a time
// (shared: Q 16 KiB + K/P 8 KiB + V 8 KiB). The kernel is attention_prefill.glsl.
#define HD 128u
#define BR 32u
#define BC 16u
#include "attention_prefill.glsl"
