#version 450
#extension GL_GOOGLE_include_directive : require
// gemv_chain.glsl for rows of at most 768 (GPT-2 124M): the second product's rows of W2
// loaded before its wait.
#define CHAIN_ROW_768
#include "gemv_chain.glsl"
