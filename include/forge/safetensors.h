// safetensors files (https://github.com/huggingface/safetensors): reading (memory-mapped,
// fully validated), writing (atomic), and model folders whose weights are one file or
// several shards listed in `model.safetensors.index.json`.
//
// File layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON
//   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<value>", ...}}
// then the data buffer; offsets are bytes relative to the start of that buffer.
//
// Errors: every function throws forge::Error whose message starts with "safetensors: <path>:"
// — ErrorKind::Io when a file is missing, unreadable or cannot be written, ErrorKind::Format
// when its contents break the format (or a requested tensor is absent), ErrorKind::Unsupported
// when a tensor has a valid dtype that forge cannot load (I64, F64, U8, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "forge/device.h"
#include "forge/error.h"
#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge {

/// One tensor's entry in a safetensors header (already validated).
struct TensorInfo {
  std::string dtype;   // the file's dtype name: "F32", "F16", "BF16", "U32", "I64", ...
  Shape shape;         // dimensions (each >= 0)
  uint64_t begin = 0;  // byte range [begin, end) in the data buffer; end - begin =
  uint64_t end = 0;    // numel * itemsize
  /// True for the dtypes `load` accepts: F32, F16, BF16 (loaded as F32) and U32 (as U32).
  bool loadable() const;
};

/// A validated, memory-mapped (read-only file, private copy-on-write mapping) safetensors
/// file. Copies share the mapping; it stays alive while any copy or any zero-copy tensor
/// loaded from it lives. Const methods are safe to call from several threads.
class SafeTensorsFile {
 public:
  /// Maps `path` and validates it: header length N <= file size - 8 and N <= 100 MiB; header
  /// is a UTF-8 JSON object without duplicate keys; every tensor entry has exactly dtype (a
  /// known safetensors name), shape (non-negative integers) and data_offsets ([begin, end],
  /// begin <= end <= data size, end - begin = numel * itemsize); tensors neither overlap nor
  /// leave holes and cover the whole data buffer (as the format requires); "__metadata__",
  /// if present, maps strings to strings. Error(Io) / Error(Format) otherwise.
  static SafeTensorsFile open(const std::string& path);

  const std::string& path() const;
  /// Tensor names in data order (ascending begin offset; ties by name).
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  /// Error(Format) "no tensor named ..." if absent.
  const TensorInfo& info(const std::string& name) const;
  /// The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const;

  /// Loads a tensor onto `device`: F32, F16 and BF16 become F32 (exact conversion, including
  /// subnormals, infinities and NaN payloads; F16 signaling NaNs come out quiet, as with
  /// F16C and PyTorch), U32 stays U32; other dtypes throw
  /// Error(Unsupported). Zero-copy for F32/U32 on the CPU when the data is 4-byte aligned: the
  /// tensor aliases the private mapping, so writing to it never touches the file, but two
  /// loads of one name then share memory (clone() for an independent copy).
  Tensor load(const std::string& name, Device device = Device::cpu()) const;

  /// The tensor's raw little-endian bytes inside the mapping (any dtype); valid while this
  /// object (or a copy) lives.
  std::span<const std::byte> raw(const std::string& name) const;

  struct Impl;  // private (src/io/safetensors_file.cpp)

 private:
  explicit SafeTensorsFile(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

/// Named tensors, written in this order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Writes `tensors` (any forge dtype, any device; stored as F32/U32/F16/BF16) and `metadata`
/// to `path`. The header is padded with spaces so that the data starts 8-byte aligned.
/// Atomic: writes "<path>.tmp.<pid>", fsyncs, renames over `path`; on failure the temp file
/// is removed and an existing `path` is left intact. Error(Format) for an empty or duplicate
/// name, the reserved name "__metadata__", an undefined tensor or non-UTF-8 text;
/// Error(Io) when the file cannot be written (missing folder, disk full, ...).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Writes a model folder (which must exist) the way HF does: everything in
/// "model.safetensors" when it fits in `max_shard_bytes` of tensor data, else shards
/// "model-00001-of-0000K.safetensors" (tensors kept in order; a tensor larger than the limit
/// gets a shard of its own) plus "model.safetensors.index.json" ({"metadata": {"total_size":
/// bytes}, "weight_map": {name: shard}}), written last. Each shard carries `metadata`. Removes
/// the other layout's stale entry file (the index, or model.safetensors) so that
/// TensorDirectory sees the new one. Returns the file names written. Errors as
/// save_safetensors; Error(Range) if max_shard_bytes == 0.
std::vector<std::string> save_safetensors_sharded(
    const std::string& dir, const NamedTensors& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata = {});

/// The weights of a model folder, one file or sharded, looked up by name.
class TensorDirectory {
 public:
  /// `path` is a folder holding "model.safetensors" (preferred, as HF does) or
  /// "model.safetensors.index.json", or directly a .safetensors file or an index file.
  /// An index must be a JSON object whose "weight_map" maps each tensor name to a plain file
  /// name in the same folder (no '/', "." or ".."); every shard must open and validate, hold
  /// every tensor mapped to it and no tensor that is not mapped to it (so no name lives in two
  /// shards). Error(Io) for missing files, Error(Format) for everything else.
  static TensorDirectory open(const std::string& path);

  /// All tensor names: shard by shard (in index order of first appearance), data order within.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  /// Error(Format) "no tensor named ..." if absent.
  const TensorInfo& info(const std::string& name) const;
  /// As SafeTensorsFile::load, from whichever shard holds `name`.
  Tensor load(const std::string& name, Device device = Device::cpu()) const;
  /// The opened files (one, or the shards).
  const std::vector<SafeTensorsFile>& files() const;
  /// The file holding `name` (Error(Format) if absent).
  const SafeTensorsFile& file_of(const std::string& name) const;

 private:
  std::vector<SafeTensorsFile> files_;
  std::vector<std::string> names_;
  std::map<std::string, size_t> where_;  // name -> index into files_
  std::string source_;                   // for messages
};

}  // namespace forge
