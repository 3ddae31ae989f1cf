// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace forge {

/// F32 is the compute type; U32 holds token ids and indices. F16/BF16 exist for storage
/// (model files) and later GPU paths; CPU kernels compute in F32.
enum class DType : uint8_t { F32, U32, F16, BF16 };

size_t dtype_size(DType dtype);  // bytes per element
const char* dtype_name(DType dtype);  // "f32", "u32", "f16", "bf16"

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<uint32_t>() { return DType::U32; }

}  // namespace forge
