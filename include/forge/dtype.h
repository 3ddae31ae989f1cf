// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace forge {

/// F32 is the compute type; U32 holds token ids and indices. F16/BF16 exist for storage
/// (model files) and weight kernels; CPU kernels compute in F32.
/// Q8_0 and Q4_0 are ggml's block dtypes, byte for byte as llama.cpp stores them: blocks
/// of 32 consecutive elements along a row, each an f16 scale d then the quants:
///   Q8_0: 34 bytes, 32 int8 q;            x = d * q
///   Q4_0: 18 bytes, 16 bytes of nibbles;  x = d * (nibble - 8), element j in byte j % 16,
///         the low nibble for j < 16, the high one for j >= 16
/// A tensor of a block dtype has whole blocks in every row: its last dimension is a
/// multiple of 32 (Tensor::empty and reshape refuse others), so views keep whole blocks.
enum class DType : uint8_t { F32, U32, F16, BF16, Q8_0, Q4_0 };

/// Every dtype, in enum order.
constexpr DType kAllDTypes[] = {DType::F32,  DType::U32,  DType::F16,
                                DType::BF16, DType::Q8_0, DType::Q4_0};

/// Elements per block: 32 for Q8_0 and Q4_0, 1 for the others.
int64_t dtype_block(DType dtype);
/// Bytes per block (for the element dtypes, per element).
size_t dtype_block_bytes(DType dtype);
bool dtype_is_block(DType dtype);
/// Bytes of n elements; n must be whole blocks (Error(Shape) otherwise).
size_t dtype_bytes(DType dtype, int64_t n);
/// Bytes per element of an element dtype; Error(DType) for a block dtype (whose bytes come
/// per block: dtype_bytes).
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "u32", "f16", "bf16", "q8_0", "q4_0"

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<uint32_t>() { return DType::U32; }

}  // namespace forge
