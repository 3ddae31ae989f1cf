// Writing GGUF v3 files: checks everything first, builds the header in memory, then streams
// the tensors through an atomic file.
#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include "forge/error.h"
#include "forge/gguf.h"
#include "forge/tensor.h"
#include "io/atomic_file.h"
#include "io/gguf_format.h"
#include "io/tensor_io.h"

namespace forge::gguf {
namespace {

[[noreturn]] void fail(const std::string& prefix, const std::string& what) {
  throw Error(ErrorKind::Format, prefix + ": " + what);
}

// Checks keys, names and tensors before anything touches the disk; returns whether
// "general.alignment" must be added to the metadata.
bool validate(const std::string& prefix, const Metadata& metadata, const NamedTensors& tensors,
              uint32_t alignment) {
  if (!format::is_power_of_two(alignment))
    fail(prefix, "alignment " + std::to_string(alignment) + " is not a power of two");
  std::unordered_set<std::string_view> keys;
  bool has_alignment = false;
  for (const auto& [key, value] : metadata) {
    if (key.empty()) fail(prefix, "empty key");
    if (key.size() > format::kMaxKeyBytes)
      fail(prefix, "key of " + std::to_string(key.size()) + " bytes, over the " +
                       std::to_string(format::kMaxKeyBytes) + "-byte limit");
    if (!format::valid_utf8(key)) fail(prefix, "key '" + key + "' is not valid UTF-8");
    if (!keys.insert(key).second) fail(prefix, "duplicate key '" + key + "'");
    if (format::Access::depth(value) > format::kMaxArrayDepth)
      fail(prefix, "key '" + key + "': arrays nested deeper than " +
                       std::to_string(format::kMaxArrayDepth) + " levels");
    if (key == format::kAlignmentKey) {
      if (value.type() != ValueType::U32 || value.as_u32() != alignment)
        fail(prefix, std::string(format::kAlignmentKey) + " in the metadata is " +
                         value.describe() + ", but the alignment is u32 " +
                         std::to_string(alignment));
      has_alignment = true;
    }
  }
  std::unordered_set<std::string_view> names;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) fail(prefix, "empty tensor name");
    if (!format::valid_utf8(name)) fail(prefix, "tensor name '" + name + "' is not valid UTF-8");
    if (name.size() > format::kMaxWrittenNameBytes)
      fail(prefix, "tensor name '" + name + "' has " + std::to_string(name.size()) +
                       " bytes, over ggml's limit of " +
                       std::to_string(format::kMaxWrittenNameBytes));
    if (!names.insert(name).second) fail(prefix, "duplicate tensor name '" + name + "'");
    const std::string ctx = "tensor '" + name + "'";
    if (!t.defined()) fail(prefix, ctx + " is undefined");
    if (t.dtype() == DType::U32)
      fail(prefix, ctx +
                       " is u32, which ggml has no tensor type for (F32, F16, BF16, Q8_0, "
                       "Q4_0 are written)");
    if (t.rank() == 0 || t.rank() > format::kMaxDims)
      fail(prefix, ctx + " has rank " + std::to_string(t.rank()) + " (GGUF holds 1 to " +
                       std::to_string(format::kMaxDims) + " dimensions)");
    for (int64_t d : t.shape().dims())
      if (d == 0) fail(prefix, ctx + " has a dimension of 0 (shape " + t.shape().str() + ")");
    if (static_cast<uint64_t>(t.numel()) > format::kMaxElements)
      fail(prefix, ctx + " has more than 2^48 elements");
  }
  return !has_alignment && alignment != format::kDefaultAlignment;
}

// The header bytes, built in memory.
class Header {
 public:
  void bits(uint64_t v, size_t n) {
    char b[8];
    std::memcpy(b, &v, 8);  // little-endian host (gguf_read.cpp asserts it)
    out_.append(b, n);
  }
  void u32(uint32_t v) { bits(v, 4); }
  void u64(uint64_t v) { bits(v, 8); }
  void string(std::string_view s) {
    u64(s.size());
    out_.append(s);
  }
  void bytes(std::span<const uint8_t> b) {
    out_.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  // A value without its type tag; arrays bring their element type and count.
  void value(const Value& v) {
    switch (v.type()) {
      case ValueType::String: string(v.as_string()); return;
      case ValueType::Array: {
        const ValueType elem = v.element_type();
        u32(static_cast<uint32_t>(elem));
        u64(v.size());
        if (elem == ValueType::String) {
          for (const std::string& s : v.as_strings()) string(s);
        } else if (elem == ValueType::Array) {
          for (const Value& item : v.as_arrays()) value(item);
        } else {
          bytes(v.raw_elements());
        }
        return;
      }
      default: bits(format::Access::bits(v), format::scalar_bytes(v.type()));
    }
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// n zero bytes (padding), without a buffer of n bytes.
void write_zeros(io::AtomicFile& out, uint64_t n) {
  static const char zeros[4096] = {};
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof zeros));
    out.write(zeros, k);
    n -= k;
  }
}

}  // namespace

void save(const std::string& path, const Metadata& metadata, const NamedTensors& tensors,
          uint32_t alignment) {
  const std::string prefix = "gguf: " + path;
  const bool add_alignment = validate(prefix, metadata, tensors, alignment);

  Header h;
  h.bytes({format::kMagic, 4});
  h.u32(format::kVersion);
  h.u64(tensors.size());
  h.u64(metadata.size() + (add_alignment ? 1 : 0));
  for (const auto& [key, value] : metadata) {
    h.string(key);
    h.u32(static_cast<uint32_t>(value.type()));
    h.value(value);
  }
  if (add_alignment) {
    h.string(format::kAlignmentKey);
    h.u32(static_cast<uint32_t>(ValueType::U32));
    h.u32(alignment);
  }
  uint64_t offset = 0;  // relative to the data section
  for (const auto& [name, t] : tensors) {
    h.string(name);
    const auto& dims = t.shape().dims();
    h.u32(static_cast<uint32_t>(dims.size()));
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) h.u64(static_cast<uint64_t>(*it));
    h.u32(ggml_type_of(t.dtype()));
    h.u64(offset);
    offset = *format::align_up(offset + t.nbytes(), alignment);
  }

  io::AtomicFile out(path, "gguf");
  const uint64_t header = h.str().size();
  out.write(h.str().data(), header);
  if (!tensors.empty()) write_zeros(out, *format::align_up(header, alignment) - header);
  for (const auto& [name, t] : tensors) {
    io::write_tensor(out, t);
    const uint64_t bytes = t.nbytes();
    write_zeros(out, *format::align_up(bytes, alignment) - bytes);
  }
  out.commit();
}

}  // namespace forge::gguf
