// What the file formats (safetensors, GGUF) share about tensors: zero-copy storage inside a
// mapped file, and streaming a tensor's bytes into a file being written.
#pragma once

#include <cstddef>
#include <memory>

#include "forge/tensor.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace forge::io {

/// CPU storage of `bytes` bytes at ptr inside `map`, keeping the mapping alive.
std::shared_ptr<Storage> mapped_storage(std::shared_ptr<MappedFile> map, std::byte* ptr,
                                        size_t bytes);

/// Appends t's bytes (any dtype, any device) to `out`; device memory goes through a bounded
/// staging buffer (the read also waits for pending work on the tensor).
void write_tensor(AtomicFile& out, const Tensor& t);

}  // namespace forge::io
