// A whole file mapped into memory, private and copy-on-write: pages may be written by the
// process (e.g. through a zero-copy tensor) but the file itself never changes. (wasm, which
// has no file mappings: a private copy of the file.)
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace forge::io {

class MappedFile {
 public:
  /// Maps `path` (which must be a regular file), guarded against the file shrinking while
  /// mapped (forge/mapped_files.h). Error(Io) "<context>: <path>: <reason>" if it
  /// cannot be opened, is not a regular file or cannot be mapped. At least 64 readable (zero)
  /// bytes follow the file's last byte, so SIMD kernels may read a vector past the end of a
  /// tensor that ends the file, as they may with backend-allocated storage.
  static std::shared_ptr<MappedFile> open(const std::string& path, const char* context);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// Start of the file's bytes (page-aligned, never nullptr).
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::byte* data_ = nullptr;
  size_t size_ = 0;       // file size in bytes
  size_t map_bytes_ = 0;  // length of the whole reservation (file + zero tail)
  bool owned_ = false;    // wasm: data_ is a copy of the file (std::free), not a mapping
  int guard_slot_ = -1;   // its entry in the SIGBUS guard (mapping_guard.h), -1: none
};

}  // namespace forge::io
