// Parsing and validation of a safetensors JSON header (private to src/io).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "forge/safetensors.h"

namespace forge::io {

/// Largest header forge reads: far above any real file (GPT-2 XL's is ~60 KiB), low enough
/// that a hostile length cannot make the parser allocate without bound.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
/// Most dimensions a tensor may have (real models use <= 5).
constexpr size_t kMaxRank = 64;

/// A safetensors dtype name and its element size in bits. Sub-byte types (F4, F6) exist in
/// the format; their byte length is numel * bits / 8 and must be whole.
struct SafetensorsDType {
  const char* name;
  uint32_t bits;
};
/// nullptr for names the format does not define.
const SafetensorsDType* find_safetensors_dtype(std::string_view name);

struct ParsedHeader {
  std::vector<std::pair<std::string, TensorInfo>> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

/// Parses `json` (the N header bytes) and validates every entry against a data buffer of
/// `data_size` bytes. Throws Error(Format) "<prefix>: <what>".
ParsedHeader parse_safetensors_header(std::string_view json, uint64_t data_size,
                                      const std::string& prefix);

}  // namespace forge::io
