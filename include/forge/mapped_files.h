// Files that shrink while forge has them memory-mapped. Model weights are mapped without a
// copy (forge/safetensors.h, forge/gguf.h), so truncating a file in use would make the next
// read of a vanished page raise SIGBUS and kill the process. Instead, forge catches that
// fault, maps zeros over the page so that the read completes, and remembers the file;
// check_mapped_files() then turns it into an error. Loads, every generated token, every
// evaluation and every training step call it, so no result computed from the zeros leaves
// forge. A file replaced by rename (as every forge writer saves) is never affected: the
// mapping keeps the old file.
//
// A file rewritten in place without changing size cannot be detected: its new bytes are
// read as they are (as with llama.cpp's and PyTorch's mapped loads).
#pragma once

namespace forge {

/// Error(Io) "<path>: the file shrank while mapped (truncated or rewritten in place?): ..."
/// for the first memory-mapped file still in use whose pages vanished under a read.
void check_mapped_files();

}  // namespace forge
