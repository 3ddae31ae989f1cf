#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention prefill for hd <= 64: 64 queries per workgroup, keys 32 at a time
// (shared: Q 16 KiB + K/P 8 KiB + V 8 KiB). The kernel is attention_prefill.glsl.
#define HD 64u
#define BR 64u
#define BC 32u
#include "attention_prefill.glsl"
