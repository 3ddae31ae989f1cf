// The WGSL of shaders/<name>.wgsl, embedded at build time (backend.cmake generates the
// table), with its "// #include NAME" lines replaced by shaders/NAME.wgsl (the shared
// reductions, GELU and Q8_0 block readers).
#pragma once

#include <string>

namespace forge::webgpu {

/// Error(Backend) for an unknown name.
std::string shader_source(const std::string& name);

}  // namespace forge::webgpu
