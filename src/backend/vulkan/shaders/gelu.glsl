// The tanh GELU shared by gelu.comp and the matmul epilogues, so a fused product gives what
// matmul followed by gelu gives: x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), the
// exp argument clamped so that it stays finite (as the CPU's exp_fast does).
#ifndef FORGE_GELU_GLSL
#define FORGE_GELU_GLSL

float gelu_tanh(float v) {
  const float u = 0.7978845608028654 * v * (1.0 + 0.044715 * v * v);
  return v / (1.0 + exp(clamp(-2.0 * u, -87.3, 88.0)));
}

#endif
