// GGUF: File (open = map + validate, typed lookups, load). Values: gguf_value.cpp.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "forge/error.h"
#include "forge/gguf.h"
#include "forge/mapped_files.h"
#include "forge/tensor.h"
#include "io/gguf_format.h"
#include "io/mapped_file.h"
#include "io/tensor_io.h"

static_assert(std::endian::native == std::endian::little,
              "GGUF data is little-endian; forge reads it in place");

namespace forge::gguf {

using format::Access;

using namespace format;  // the typed conversions (gguf_value.cpp)

// ---- File -------------------------------------------------------------------------------------

struct File::Impl {
  std::string path;
  std::shared_ptr<io::MappedFile> map;
  uint32_t version = 0;
  uint64_t alignment = format::kDefaultAlignment;
  uint64_t data_offset = 0;
  Metadata metadata;
  std::unordered_map<std::string, size_t> keys;  // key -> index into metadata
  std::vector<TensorEntry> tensors;
  std::unordered_map<std::string, size_t> names;  // name -> index into tensors

  std::string prefix() const { return "gguf: " + path; }
  const TensorEntry& entry(const std::string& name) const {
    auto it = names.find(name);
    if (it == names.end()) fail(prefix(), "no tensor named '" + name + "'");
    return tensors[it->second];
  }
};

namespace {

std::string ne_str(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Reads the file front to back; every read is checked against the bytes left.
class Reader {
 public:
  Reader(const std::byte* base, uint64_t size, std::string prefix)
      : base_(base), size_(size), prefix_(std::move(prefix)) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& prefix() const { return prefix_; }
  [[noreturn]] void fail(const std::string& what) const { gguf::fail(prefix_, what); }

  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      fail("truncated: " + what + " at byte " + std::to_string(pos_) + " needs " +
           std::to_string(n) + " bytes, the file has " + std::to_string(left()) + " left");
  }
  // n bytes (n <= 8), zero-extended.
  uint64_t bits(size_t n, const std::string& what) {
    need(n, what);
    uint64_t v = 0;
    std::memcpy(&v, base_ + pos_, n);  // little-endian host (static_assert above)
    pos_ += n;
    return v;
  }
  uint32_t u32(const std::string& what) { return static_cast<uint32_t>(bits(4, what)); }
  uint64_t u64(const std::string& what) { return bits(8, what); }
  std::string_view bytes(uint64_t n) {
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  std::string_view string(const std::string& what) {
    const uint64_t at = pos_;
    const uint64_t n = u64(what + " length");
    if (n > left())
      fail(what + " at byte " + std::to_string(at) + " has length " + std::to_string(n) +
           ", past the end of the file (" + std::to_string(left()) + " bytes left)");
    return bytes(n);
  }

 private:
  const std::byte* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string prefix_;
};

ValueType checked_type(Reader& r, uint32_t t, const std::string& what) {
  if (!format::is_known_value_type(t))
    r.fail(what + " has unknown value type " + std::to_string(t));
  return static_cast<ValueType>(t);
}

// A value of type t for `ctx` ("key 'k'"); depth = arrays enclosing it.
Value read_value(Reader& r, ValueType t, const std::string& ctx, int depth) {
  if (t == ValueType::String) return Value::string(std::string(r.string(ctx + " string")));
  if (t != ValueType::Array) {
    const uint64_t bits = r.bits(format::scalar_bytes(t), ctx + " " + value_type_name(t));
    if (t == ValueType::Bool && bits > 1)
      r.fail(ctx + ": bool byte " + std::to_string(bits) + " is neither 0 nor 1");
    return Access::scalar(t, bits);
  }
  if (depth + 1 > format::kMaxArrayDepth)
    r.fail(ctx + ": arrays nested deeper than " + std::to_string(format::kMaxArrayDepth) +
           " levels");
  const ValueType elem = checked_type(r, r.u32(ctx + " array type"), ctx + " array");
  const uint64_t count = r.u64(ctx + " array length");
  const uint64_t min = format::min_element_bytes(elem);
  if (count > r.left() / min)
    r.fail(ctx + ": array of " + std::to_string(count) + " " + value_type_name(elem) +
           " elements cannot fit in the " + std::to_string(r.left()) + " bytes left");
  if (elem == ValueType::String) {
    std::vector<std::string> items;
    items.reserve(count);
    for (uint64_t i = 0; i < count; ++i)
      items.emplace_back(r.string(ctx + " element " + std::to_string(i)));
    return Value::strings(std::move(items));
  }
  if (elem == ValueType::Array) {
    std::vector<Value> items;
    items.reserve(count);
    for (uint64_t i = 0; i < count; ++i)
      items.push_back(
          read_value(r, ValueType::Array, ctx + " element " + std::to_string(i), depth + 1));
    return Value::arrays(std::move(items));
  }
  const std::string_view raw = r.bytes(count * min);  // fits: checked above
  if (elem == ValueType::Bool) {
    for (size_t i = 0; i < raw.size(); ++i)
      if (static_cast<unsigned char>(raw[i]) > 1)
        r.fail(ctx + ": bool element " + std::to_string(i) + " is byte " +
               std::to_string(static_cast<unsigned char>(raw[i])) + ", neither 0 nor 1");
  }
  return Access::numeric_array(elem, std::vector<uint8_t>(raw.begin(), raw.end()));
}

// Fewest bytes a key-value pair and a tensor entry take: a 1-byte key, a type, a 1-byte
// value; a 1-byte name, n_dims, one dimension, a type, an offset.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorBytes = 8 + 1 + 4 + 8 + 4 + 8;

void read_metadata(Reader& r, File::Impl& f, uint64_t count) {
  if (count > r.left() / kMinKvBytes)
    r.fail("metadata_kv_count " + std::to_string(count) + " cannot fit in the " +
           std::to_string(r.left()) + " bytes left");
  f.metadata.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t at = r.pos();
    const std::string_view key = r.string("key " + std::to_string(i));
    if (key.empty()) r.fail("empty key at byte " + std::to_string(at));
    if (key.size() > format::kMaxKeyBytes)
      r.fail("key at byte " + std::to_string(at) + " has " + std::to_string(key.size()) +
             " bytes, over the " + std::to_string(format::kMaxKeyBytes) + "-byte limit");
    if (!format::valid_utf8(key))
      r.fail("key at byte " + std::to_string(at) + " is not valid UTF-8");
    std::string k(key);
    const std::string ctx = "key '" + k + "'";
    if (f.keys.count(k)) r.fail("duplicate key '" + k + "'");
    const ValueType t = checked_type(r, r.u32(ctx + " value type"), ctx);
    Value v = read_value(r, t, ctx, 0);
    f.keys.emplace(k, f.metadata.size());
    f.metadata.emplace_back(std::move(k), std::move(v));
  }
  auto it = f.keys.find(format::kAlignmentKey);
  if (it != f.keys.end()) {
    const Value& v = f.metadata[it->second].second;
    if (v.type() != ValueType::U32)
      r.fail(std::string(format::kAlignmentKey) + " is " + type_desc(v) + ", expected u32");
    const uint64_t a = v.as_u32();
    if (!format::is_power_of_two(a))
      r.fail(std::string(format::kAlignmentKey) + " " + std::to_string(a) +
             " is not a power of two");
    f.alignment = a;
  }
}

// One tensor entry, checked on its own (placement in the file comes later).
TensorEntry read_tensor(Reader& r, const File::Impl& f) {
  const uint64_t at = r.pos();
  TensorEntry e;
  const std::string_view name = r.string("tensor name");
  if (name.empty()) r.fail("empty tensor name at byte " + std::to_string(at));
  if (!format::valid_utf8(name))
    r.fail("tensor name at byte " + std::to_string(at) + " is not valid UTF-8");
  e.name = std::string(name);
  const std::string ctx = "tensor '" + e.name + "'";
  if (f.names.count(e.name)) r.fail("duplicate tensor name '" + e.name + "'");
  const uint32_t n_dims = r.u32(ctx + " n_dims");
  if (n_dims == 0 || n_dims > format::kMaxDims)
    r.fail(ctx + " has " + std::to_string(n_dims) + " dimensions (1 to " +
           std::to_string(format::kMaxDims) + " allowed)");
  e.ne.resize(n_dims);
  for (uint32_t k = 0; k < n_dims; ++k) e.ne[k] = r.u64(ctx + " ne[" + std::to_string(k) + "]");
  e.ggml_type = r.u32(ctx + " type");
  const uint64_t rel = r.u64(ctx + " offset");

  uint64_t n = 1;
  for (uint64_t d : e.ne) {
    if (d == 0) r.fail(ctx + " has a dimension of 0 (ne " + ne_str(e.ne) + ")");
    if (n > format::kMaxElements / d)
      r.fail(ctx + ": ne " + ne_str(e.ne) + " has more than 2^48 elements");
    n *= d;
  }
  const format::GgmlType* gt = format::find_ggml_type(e.ggml_type);
  if (!gt) r.fail(ctx + " has unknown ggml type " + std::to_string(e.ggml_type));
  if (e.ne[0] % gt->block != 0)
    r.fail(ctx + ": ne[0] = " + std::to_string(e.ne[0]) + " is not a multiple of " + gt->name +
           "'s block of " + std::to_string(gt->block) + " elements");
  if (rel % f.alignment != 0)
    r.fail(ctx + ": offset " + std::to_string(rel) + " is not a multiple of the alignment " +
           std::to_string(f.alignment));
  e.dtype = dtype_of_ggml(e.ggml_type);
  e.bytes = n / gt->block * gt->block_bytes;  // <= 2^48 * 292: no overflow
  e.offset = rel;                             // made absolute by open()
  return e;
}

}  // namespace

File File::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->map = io::MappedFile::open(path, "gguf");
  const uint64_t size = impl->map->size();
  Reader r(impl->map->data(), size, impl->prefix());

  r.need(4, "magic");
  const std::string_view magic = r.bytes(4);
  if (std::memcmp(magic.data(), format::kMagic, 4) != 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", static_cast<unsigned char>(magic[0]),
                  static_cast<unsigned char>(magic[1]), static_cast<unsigned char>(magic[2]),
                  static_cast<unsigned char>(magic[3]));
    r.fail(std::string("not a GGUF file: magic bytes ") + hex +
           ", expected 47 47 55 46 (\"GGUF\")");
  }
  impl->version = r.u32("version");
  if (impl->version != format::kVersion) {
    if (impl->version == 0x03000000u)
      r.fail("a big-endian GGUF file (version 3 byte-swapped); forge reads little-endian ones");
    r.fail("GGUF version " + std::to_string(impl->version) +
           " is not supported (forge reads version 3)");
  }
  const uint64_t tensor_count = r.u64("tensor_count");
  const uint64_t kv_count = r.u64("metadata_kv_count");
  if (tensor_count > r.left() / kMinTensorBytes)
    r.fail("tensor_count " + std::to_string(tensor_count) + " cannot fit in the " +
           std::to_string(r.left()) + " bytes left");
  read_metadata(r, *impl, kv_count);

  if (tensor_count > r.left() / kMinTensorBytes)
    r.fail("tensor_count " + std::to_string(tensor_count) + " cannot fit in the " +
           std::to_string(r.left()) + " bytes left after the metadata");
  impl->tensors.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorEntry e = read_tensor(r, *impl);
    impl->names.emplace(e.name, impl->tensors.size());
    impl->tensors.push_back(std::move(e));
  }

  // The data section starts at the next multiple of the alignment (possibly past the end of
  // a file without tensors); every tensor must lie inside the file, none overlapping.
  impl->data_offset = *format::align_up(r.pos(), impl->alignment);  // pos <= size: no overflow
  const uint64_t data = impl->data_offset;
  for (TensorEntry& e : impl->tensors) {
    if (data > size || e.offset > size - data || e.bytes > size - data - e.offset)
      r.fail("tensor '" + e.name + "': " + std::to_string(e.bytes) + " bytes at offset " +
             std::to_string(e.offset) + " of the data section (byte " + std::to_string(data) +
             ") run past the end of the file (" + std::to_string(size) + " bytes)");
    e.offset += data;
  }
  std::vector<size_t> order(impl->tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return impl->tensors[a].offset < impl->tensors[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorEntry& prev = impl->tensors[order[i - 1]];
    const TensorEntry& cur = impl->tensors[order[i]];
    if (prev.offset + prev.bytes > cur.offset)
      r.fail("tensors '" + prev.name + "' and '" + cur.name + "' overlap: bytes [" +
             std::to_string(prev.offset) + ", " + std::to_string(prev.offset + prev.bytes) +
             ") and [" + std::to_string(cur.offset) + ", " +
             std::to_string(cur.offset + cur.bytes) + ")");
  }
  check_mapped_files();  // the header was read from the mapping
  return File(std::move(impl));
}

const std::string& File::path() const { return impl_->path; }
uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
const Metadata& File::metadata() const { return impl_->metadata; }
const std::vector<TensorEntry>& File::tensors() const { return impl_->tensors; }

const Value* File::find(const std::string& key) const {
  auto it = impl_->keys.find(key);
  return it == impl_->keys.end() ? nullptr : &impl_->metadata[it->second].second;
}

const Value& File::get(const std::string& key) const {
  const Value* v = find(key);
  if (!v) fail(impl_->prefix(), "no key '" + key + "'");
  return *v;
}

namespace {

// The value of `key` for a typed lookup: Error(Format) naming the expected type if absent.
const Value& lookup(const File& f, const std::string& key, const char* expected) {
  const Value* v = f.find(key);
  if (!v) fail("gguf: " + f.path(), "no key '" + key + "' (expected " + expected + ")");
  return *v;
}

std::string key_ctx(const File& f, const std::string& key) {
  return "gguf: " + f.path() + ": key '" + key + "'";
}

}  // namespace

uint64_t File::get_u64(const std::string& key) const {
  return to_u64(lookup(*this, key, "u64"), key_ctx(*this, key),
                std::numeric_limits<uint64_t>::max(), "u64");
}
uint32_t File::get_u32(const std::string& key) const {
  return static_cast<uint32_t>(to_u64(lookup(*this, key, "u32"), key_ctx(*this, key),
                                      std::numeric_limits<uint32_t>::max(), "u32"));
}
int64_t File::get_i64(const std::string& key) const {
  return to_i64(lookup(*this, key, "i64"), key_ctx(*this, key), std::numeric_limits<int64_t>::min(),
                std::numeric_limits<int64_t>::max(), "i64");
}
double File::get_f64(const std::string& key) const {
  return to_f64(lookup(*this, key, "a number"), key_ctx(*this, key));
}
float File::get_f32(const std::string& key) const {
  return to_f32(lookup(*this, key, "a number"), key_ctx(*this, key));
}
bool File::get_bool(const std::string& key) const {
  return to_bool(lookup(*this, key, "bool"), key_ctx(*this, key));
}
const std::string& File::get_string(const std::string& key) const {
  return to_text(lookup(*this, key, "string"), key_ctx(*this, key));
}
const std::vector<std::string>& File::get_strings(const std::string& key) const {
  return to_strings(lookup(*this, key, "array of string"), key_ctx(*this, key));
}
std::vector<int64_t> File::get_i64s(const std::string& key) const {
  return to_i64s(lookup(*this, key, "an integer array"), key_ctx(*this, key));
}
std::vector<double> File::get_f64s(const std::string& key) const {
  return to_f64s(lookup(*this, key, "a numeric array"), key_ctx(*this, key));
}

const TensorEntry* File::tensor(const std::string& name) const {
  auto it = impl_->names.find(name);
  return it == impl_->names.end() ? nullptr : &impl_->tensors[it->second];
}

std::span<const std::byte> File::raw(const std::string& name) const {
  const TensorEntry& e = impl_->entry(name);
  return {impl_->map->data() + e.offset, static_cast<size_t>(e.bytes)};
}

Tensor File::load(const std::string& name, Device device) const {
  const TensorEntry& e = impl_->entry(name);
  if (!e.dtype)
    throw Error(ErrorKind::Unsupported,
                impl_->prefix() + ": tensor '" + name + "' has ggml type " +
                    ggml_type_name(e.ggml_type) + " (" + std::to_string(e.ggml_type) +
                    "), which forge has no dtype for (F32, F16, BF16, Q8_0, Q4_0)");
  const DType dt = *e.dtype;
  std::byte* src = impl_->map->data() + e.offset;
  const size_t bytes = static_cast<size_t>(e.bytes);
  const size_t need_align = dt == DType::F32 ? 4 : 2;  // f16 scales of the block dtypes: 2
  if (device.is_cpu() && reinterpret_cast<uintptr_t>(src) % need_align == 0) {
    // The mapping is private and writable: File's const is only its own view of it.
    auto storage = io::mapped_storage(impl_->map, src, bytes);
    return Tensor(std::move(storage), 0, e.shape(), dt);
  }
  Tensor t = Tensor::empty(e.shape(), dt, device);
  device_memory(device).write(*t.storage(), 0, src, bytes);
  check_mapped_files();  // the copy read the file: did it shrink meanwhile?
  return t;
}

}  // namespace forge::gguf
