// Writing safetensors files: one file, or a sharded model folder with its index.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "forge/error.h"
#include "forge/safetensors.h"
#include "forge/tensor.h"
#include "io/atomic_file.h"
#include "io/tensor_io.h"

namespace forge {
namespace {

const char* safetensors_name(DType dt) {
  switch (dt) {
    case DType::F32: return "F32";
    case DType::U32: return "U32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0:
    case DType::Q4_0: break;  // refused by validate()
  }
  return "?";
}

// Checks names and tensors before anything touches the disk.
void validate(const std::string& prefix, const NamedTensors& tensors,
              const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw Error(ErrorKind::Format, prefix + ": empty tensor name");
    if (name == "__metadata__")
      throw Error(ErrorKind::Format, prefix + ": '__metadata__' is reserved, not a tensor name");
    if (!seen.insert(name).second)
      throw Error(ErrorKind::Format, prefix + ": duplicate tensor name '" + name + "'");
    if (!t.defined())
      throw Error(ErrorKind::Format, prefix + ": tensor '" + name + "' is undefined");
    if (dtype_is_block(t.dtype()))
      throw Error(ErrorKind::DType, prefix + ": tensor '" + name + "' is " + dtype_name(t.dtype()) +
                                        ", which safetensors has no dtype for (GGUF has)");
  }
  (void)metadata;  // any strings; UTF-8 validity is checked when the header is built
}

// The header JSON, padded with spaces so that 8 + its length is a multiple of 8 (the data
// then starts 8-byte aligned in the file, and so in a page-aligned mapping).
std::string build_header(const std::string& prefix, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.nbytes();
    h[name] = {{"dtype", safetensors_name(t.dtype())},
               {"shape", t.shape().dims()},
               {"data_offsets", {pos, pos + bytes}}};
    pos += bytes;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const nlohmann::json::exception&) {
    // dump() throws type_error 316 on invalid UTF-8 in a name or metadata string.
    throw Error(ErrorKind::Format,
                prefix + ": a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_file(const std::string& path, const NamedTensors& tensors,
                const std::map<std::string, std::string>& metadata) {
  const std::string prefix = "safetensors: " + path;
  validate(prefix, tensors, metadata);
  const std::string header = build_header(prefix, tensors, metadata);
  io::AtomicFile out(path, "safetensors");
  const uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(len, 8);
  out.write(header.data(), header.size());
  for (const auto& [name, t] : tensors) io::write_tensor(out, t);
  out.commit();
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string shard_name(size_t i, size_t k) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, k);
  return buf;
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file(path, tensors, metadata);
}

std::vector<std::string> save_safetensors_sharded(
    const std::string& dir, const NamedTensors& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata) {
  const std::string prefix = "safetensors: " + dir;
  if (max_shard_bytes == 0)
    throw Error(ErrorKind::Range, prefix + ": max_shard_bytes must be positive");
  if (!is_dir(dir)) throw Error(ErrorKind::Io, prefix + ": not an existing folder");
  validate(prefix, tensors, metadata);
  const std::string base = dir.back() == '/' ? dir : dir + "/";

  // Greedy packing in order: a shard closes when the next tensor would overflow it.
  std::vector<NamedTensors> shards(1);
  uint64_t used = 0;
  for (const auto& nt : tensors) {
    const uint64_t bytes = nt.second.nbytes();
    if (!shards.back().empty() && used + bytes > max_shard_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().push_back(nt);
    used += bytes;
  }

  std::vector<std::string> written;
  if (shards.size() == 1) {
    write_file(base + "model.safetensors", tensors, metadata);
    ::unlink((base + "model.safetensors.index.json").c_str());
    return {"model.safetensors"};
  }

  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i, shards.size());
    write_file(base + name, shards[i], metadata);
    written.push_back(name);
    for (const auto& [tname, t] : shards[i]) {
      weight_map[tname] = name;
      total += t.nbytes();
    }
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";  // names were UTF-8-checked by write_file
  {
    io::AtomicFile out(base + "model.safetensors.index.json", "safetensors");
    out.write(text.data(), text.size());
    out.commit();
  }
  written.push_back("model.safetensors.index.json");
  // TensorDirectory prefers model.safetensors: a stale one would hide the new shards.
  ::unlink((base + "model.safetensors").c_str());
  return written;
}

}  // namespace forge
