// What the Vulkan kernel files share (internal): tensors as shader bindings, push-constant
// words, and windows of a binding (Context::window_elements says how large).
#pragma once

#include <cstdint>
#include <string>
#include "core/bit_cast.h"

#include "backend/vulkan/context.h"
#include "forge/error.h"
#include "forge/tensor.h"

namespace forge::vk {

inline const VkStorage& storage_of(const Tensor& t) {
  const auto* s = dynamic_cast<const VkStorage*>(t.storage().get());
  if (!s) throw Error(ErrorKind::Device, "vulkan: " + t.str() + " is not a Vulkan tensor");
  return *s;
}

/// A tensor bound for reading (in) or writing (out); a whole scratch buffer.
inline Arg in(const Tensor& t) { return {&storage_of(t), t.offset() * 4, t.nbytes(), false}; }
inline Arg out(const Tensor& t) { return {&storage_of(t), t.offset() * 4, t.nbytes(), true}; }
inline Arg whole(const VkStorage& s, bool write) { return {&s, 0, s.bytes(), write}; }

/// Elements [begin, begin + count) of a binding of 4-byte elements.
inline Arg window(Arg a, uint64_t begin, uint64_t count) {
  a.offset += static_cast<size_t>(begin * 4);
  a.bytes = static_cast<size_t>(count * 4);
  return a;
}

/// A push-constant word: a size (Error(Unsupported) beyond the kernels' 32-bit indices) or
/// a float's bits.
inline uint32_t u(int64_t v) {
  if (v < 0 || v > 0xFFFFFFFFll)
    throw Error(ErrorKind::Unsupported,
                "vulkan: size " + std::to_string(v) + " does not fit the kernels' 32-bit indices");
  return static_cast<uint32_t>(v);
}
inline uint32_t f(float v) { return forge::bit_cast<uint32_t>(v); }

constexpr uint64_t kWidth = 256;  // invocations per workgroup of the 1-D and row shaders
// Epilogue flags of the matmul shaders (matmul_epilogue.glsl), beside 1 trans_a, 2 trans_b,
// 4 bias and 64 split k in their `flags` push constant.
constexpr uint32_t kEpilogueGelu = 8;
constexpr uint32_t kEpilogueAdd = 16;

}  // namespace forge::vk
