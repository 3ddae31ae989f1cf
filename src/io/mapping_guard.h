// The SIGBUS guard behind forge/mapped_files.h: a lock-free table of mapped ranges that the
// signal handler reads, and the list of live MappedFiles that check_mapped_files() walks.
#pragma once

#include <cstddef>
#include <string>

namespace forge::io {

/// Registers [begin, begin + bytes) as the mapping of `path` (installing the SIGBUS handler
/// on first use); returns a slot for unregister/damaged, or -1 when the table is full (the
/// range is then unguarded, as before this guard existed).
int guard_mapping(const void* begin, size_t bytes, const std::string& path);
void unguard_mapping(int slot);

}  // namespace forge::io
