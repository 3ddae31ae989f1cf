// Writing a file atomically: readers see the old file or the complete new one, never a
// partial one, and a failed write leaves the old file intact.
#pragma once

#include <cstddef>
#include <string>

namespace forge::io {

class AtomicFile {
 public:
  /// Creates "<path>.tmp.<pid>" for writing, first removing the "<path>.tmp.<N>" files of
  /// processes N that no longer exist (writers killed mid-write). Error(Io) "<context>:
  /// <path>: <reason>".
  AtomicFile(const std::string& path, const char* context);
  /// Removes the temp file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes (retrying short writes and EINTR). Error(Io) on failure (e.g. ENOSPC).
  void write(const void* data, size_t bytes);
  /// fsync, close, rename over the target, fsync the folder. Error(Io) on failure.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what);
  std::string path_, tmp_, context_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace forge::io
