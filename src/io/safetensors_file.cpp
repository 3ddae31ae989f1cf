// SafeTensorsFile: open (map + validate) and load (zero-copy or converting).
#include <bit>

#include <cstring>
#include <unordered_map>
#include "core/bit_cast.h"

#include "backend/cpu/thread_pool.h"
#include "forge/error.h"
#include "forge/mapped_files.h"
#include "forge/safetensors.h"
#include "forge/tensor.h"
#include "io/half.h"
#include "io/mapped_file.h"
#include "io/safetensors_header.h"
#include "io/tensor_io.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; forge reads it in place");

namespace forge {

struct SafeTensorsFile::Impl {
  std::string path;
  std::shared_ptr<io::MappedFile> map;
  const std::byte* data = nullptr;  // start of the data buffer inside the mapping
  std::vector<std::string> names;   // data order
  std::unordered_map<std::string, TensorInfo> infos;
  std::map<std::string, std::string> metadata;

  std::string prefix() const { return "safetensors: " + path; }
};

namespace {

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian host (static_assert above)
  return v;
}

// Widens n 16-bit values at src (any alignment) to f32 at dst, in parallel for large n.
template <uint32_t (*Widen)(uint16_t)>
void widen16(const std::byte* src, float* dst, int64_t n) {
  cpu::parallel_for(n, 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = forge::bit_cast<float>(Widen(h));
    }
  });
}

}  // namespace

bool TensorInfo::loadable() const {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "U32";
}

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  const std::string prefix = impl->prefix();
  impl->map = io::MappedFile::open(path, "safetensors");
  const std::byte* base = impl->map->data();
  const uint64_t size = impl->map->size();
  if (size < 8)
    throw Error(ErrorKind::Format, prefix + ": file has " + std::to_string(size) +
                                       " bytes, fewer than the 8-byte header length");
  const uint64_t n = read_u64_le(base);
  if (n > io::kMaxHeaderBytes)
    throw Error(ErrorKind::Format, prefix + ": header length " + std::to_string(n) +
                                       " exceeds the " + std::to_string(io::kMaxHeaderBytes >> 20) +
                                       " MiB limit");
  if (n > size - 8)
    throw Error(ErrorKind::Format, prefix + ": header length " + std::to_string(n) +
                                       " exceeds the file's remaining " + std::to_string(size - 8) +
                                       " bytes");
  const std::string_view json(reinterpret_cast<const char*>(base + 8), n);
  io::ParsedHeader header = io::parse_safetensors_header(json, size - 8 - n, prefix);
  impl->data = base + 8 + n;
  impl->metadata = std::move(header.metadata);
  impl->names.reserve(header.tensors.size());
  for (auto& [name, info] : header.tensors) {
    impl->names.push_back(name);
    impl->infos.emplace(std::move(name), std::move(info));
  }
  check_mapped_files();  // the header was read from the mapping
  return SafeTensorsFile(std::move(impl));
}

const std::string& SafeTensorsFile::path() const { return impl_->path; }
const std::vector<std::string>& SafeTensorsFile::names() const { return impl_->names; }
const std::map<std::string, std::string>& SafeTensorsFile::metadata() const {
  return impl_->metadata;
}
bool SafeTensorsFile::contains(const std::string& name) const {
  return impl_->infos.count(name) != 0;
}

const TensorInfo& SafeTensorsFile::info(const std::string& name) const {
  auto it = impl_->infos.find(name);
  if (it == impl_->infos.end())
    throw Error(ErrorKind::Format, impl_->prefix() + ": no tensor named '" + name + "'");
  return it->second;
}

std::span<const std::byte> SafeTensorsFile::raw(const std::string& name) const {
  const TensorInfo& ti = info(name);
  return {impl_->data + ti.begin, static_cast<size_t>(ti.end - ti.begin)};
}

Tensor SafeTensorsFile::load(const std::string& name, Device device) const {
  const TensorInfo& ti = info(name);
  const std::byte* src = impl_->data + ti.begin;
  const size_t bytes = static_cast<size_t>(ti.end - ti.begin);
  if (ti.dtype == "F32" || ti.dtype == "U32") {
    const DType dt = ti.dtype == "F32" ? DType::F32 : DType::U32;
    if (device.is_cpu() && bytes > 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0) {
      // The mapping is private and writable: the const is only this object's view of it.
      auto storage = io::mapped_storage(impl_->map, const_cast<std::byte*>(src), bytes);
      return Tensor(std::move(storage), 0, ti.shape, dt);
    }
    Tensor t = Tensor::empty(ti.shape, dt, device);
    if (bytes > 0) device_memory(device).write(*t.storage(), 0, src, bytes);
    check_mapped_files();  // the copy read the file: did it shrink meanwhile?
    return t;
  }
  if (ti.dtype == "F16" || ti.dtype == "BF16") {
    Tensor t = Tensor::empty(ti.shape, DType::F32, Device::cpu());
    if (ti.dtype == "F16")
      widen16<io::f16_to_f32_bits>(src, t.data<float>(), t.numel());
    else
      widen16<io::bf16_to_f32_bits>(src, t.data<float>(), t.numel());
    check_mapped_files();
    return device.is_cpu() ? t : t.to(device);
  }
  throw Error(ErrorKind::Unsupported, impl_->prefix() + ": tensor '" + name + "' has dtype " +
                                          ti.dtype +
                                          ", which forge cannot load (F32, F16, BF16, U32)");
}

}  // namespace forge
