// The compute shaders, compiled to SPIR-V at build time (glslc) and embedded by
// cmake/embed_spirv.cmake: one entry per src/backend/vulkan/shaders/<name>.comp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace forge::vk {

struct ShaderBlob {
  const char* name;      // the file name without ".comp"
  const uint32_t* code;  // SPIR-V words
  size_t words;
};

extern const ShaderBlob kShaders[];
extern const size_t kShaderCount;

}  // namespace forge::vk
