// Converting weights between f32 and the storage dtypes (forge/dtype.h): f16 and bf16, and
// ggml's block formats Q8_0 and Q4_0, rounded as llama.cpp's reference quantizers round, so
// that forge's files hold what llama.cpp's tools would write.
#pragma once

#include <string>

#include "forge/tensor.h"

namespace forge {

/// `w` (F32, any shape; its last dimension a multiple of 32 for the block dtypes) in `dtype`,
/// on w's device:
///   F16, BF16  each value rounded to nearest even (overflow: infinity; NaN stays NaN);
///   Q8_0       per block of 32: d = max|x| / 127, q = round(x / d) (half away from zero),
///              d stored as f16;
///   Q4_0       per block: m = the value of largest magnitude (the first of equals),
///              d = m / -8, q = min(15, trunc(x / d + 8.5)) stored as nibbles, d as f16;
///   F32        a copy.
/// Errors: w undefined or not F32, U32 asked for (DType); a block dtype with a last dimension
/// that is not whole blocks (Shape).
Tensor convert_weights(const Tensor& w, DType dtype);

/// The weight dtype named "f32", "f16", "bf16", "q8_0" or "q4_0" (dtype_name's names);
/// Error(Format) naming them for anything else.
DType weight_dtype_named(const std::string& name);

/// Any weight dtype as F32, on w's device: exact for F16 and BF16, d * q for the blocks.
/// Error(DType) for U32.
Tensor widen_weights(const Tensor& w);

}  // namespace forge
