// The layout of GPT-2's weights in other dtypes (internal to src/models/gpt2): linear
// weights are F32 [in, out] (HF's Conv1D) or, in F16 / BF16 / Q8_0 / Q4_0, [out, in] (GGUF's,
// blocks along `in`), used by matmul with trans_b.
#pragma once

#include <string>

#include "forge/gpt2.h"
#include "forge/ops.h"

namespace forge::gpt2 {

/// A 2-D tensor of an element dtype (f32, f16, bf16) transposed, on its device.
Tensor transposed(const Tensor& w);
/// An f32 linear weight [in, out] stored as `dtype` (layout above).
Tensor linear_in_dtype(const Tensor& w_in_out, DType dtype);
/// A linear weight of any dtype as f32 [in, out].
Tensor linear_as_f32(const Tensor& w);
/// The product's spec for linear weight w (trans_b for the [out, in] dtypes).
inline MatmulSpec linear_spec(const Tensor& w, MatmulSpec s = {}) {
  s.trans_b = w.dtype() != DType::F32;
  return s;
}
/// w with every weight whose dtype `device` has no kernels for widened to f32 (a GPU backend
/// without them).
Weights runnable_on(Weights w, Device device);

/// Whether `path` names a GGUF file (a regular file called *.gguf).
bool is_gguf_path(const std::string& path);
/// Model::load of a GGUF file (gguf_model.cpp).
Model load_gguf_model(const std::string& path, Device device);

}  // namespace forge::gpt2
