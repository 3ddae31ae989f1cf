// AdamWStep: the constants of one AdamW update, as the ops layer hands them to kernels
// (OpAttrs::adamw, forge/backend.h). A header of its own: the CPU's ISA-specific files use
// it and must include nothing with inline code.
#pragma once

namespace forge {

/// One AdamW update's constants (forge::adamw), formed once by the ops layer in double and
/// rounded once, as torch does with its Python-float hyperparameters; every backend's kernel
/// applies exactly these:
///   p = p * decay - step_size * m' / (sqrt(v') / bc2_sqrt + eps), with
///   m' = beta1 m + one_minus_beta1 g,  v' = beta2 v + one_minus_beta2 g^2.
struct AdamWStep {
  float decay;  // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float eps;
};

}  // namespace forge
