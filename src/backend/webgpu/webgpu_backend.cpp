// The WebGPU backend's device, memory and registration (kernels: kernels.cpp).
#include "backend/webgpu/webgpu_backend.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "backend/webgpu/js_imports.h"
#include "backend/webgpu/shader_sources.h"
#include "forge/error.h"

namespace forge::webgpu {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::Backend, "webgpu: " + what);
}

size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

const GpuStorage& gpu(const Storage& s) { return static_cast<const GpuStorage&>(s); }

// SwiftShader (Chromium's, and Dawn's fallback adapter) runs WebGPU on the CPU.
bool is_cpu_adapter(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name.find("swiftshader") != std::string::npos;
}

}  // namespace

GpuStorage::~GpuStorage() { owner_->release(id_, capacity_); }

WebGpuBackend::WebGpuBackend() {
  if (!forge_wgpu_available())
    throw Error(ErrorKind::Device,
                "device webgpu: no WebGPU device (navigator.gpu has no adapter)");
  char name[256];
  forge_wgpu_adapter_name(name, sizeof name);
  adapter_ = name;
  double lim[9];
  forge_wgpu_limits(lim);
  // Bindings and buffers stay below 4 GiB: the glue's offsets and sizes are u32.
  max_binding_ = static_cast<size_t>(std::min(lim[0], 4294967040.0)) / 256 * 256;
  window_bytes_ = max_binding_;
  max_buffer_ = static_cast<size_t>(std::min(lim[1], 4294967040.0));
  max_groups_ = static_cast<uint32_t>(lim[5]);
  offset_align_ = static_cast<uint32_t>(lim[6]);
  f16_ = lim[7] != 0;
  subgroups_ = lim[8] != 0;
  split_decode_ = !is_cpu_adapter(adapter_);
  if (const char* e = std::getenv("FORGE_WEBGPU_DECODE"); e && *e) {
    const std::string v = e;
    if (v != "split" && v != "rows")
      throw Error(ErrorKind::Format, "FORGE_WEBGPU_DECODE=" + v + ": expected split or rows");
    split_decode_ = v == "split";
  }
  register_kernels();
  unused_ = allocate_zeros(256);
}

WebGpuBackend::~WebGpuBackend() = default;

DeviceInfo WebGpuBackend::info() const {
  DeviceInfo d;
  d.device = Device("webgpu", 0);
  d.name = adapter_;
  d.kind = "webgpu";
  d.max_binding_bytes = max_binding_;
  d.limits = {{"max buffer", std::to_string(max_buffer_)},
              {"workgroups per dimension", std::to_string(max_groups_)},
              {"storage offset alignment", std::to_string(offset_align_)},
              {"shader-f16", f16_ ? "yes" : "no"},
              {"subgroups", subgroups_ ? "yes" : "no"}};
  return d;
}

std::shared_ptr<Storage> WebGpuBackend::allocate(size_t bytes) {
  const size_t capacity = round_up(std::max<size_t>(bytes, 4), 256);
  if (capacity > max_buffer_)
    throw Error(ErrorKind::Unsupported, "webgpu: a buffer of " + std::to_string(bytes) +
                                            " bytes is over the device's "
                                            "maxBufferSize (" +
                                            std::to_string(max_buffer_) + " bytes)");
  uint32_t id = 0;
  if (auto it = pool_.find(capacity); it != pool_.end()) {
    id = it->second;
    pool_.erase(it);
    pooled_bytes_ -= capacity;
  } else {
    id = forge_wgpu_buffer_create(static_cast<uint32_t>(capacity));
    ++allocations_;
  }
  return std::make_shared<GpuStorage>(Device("webgpu", 0), bytes, id, capacity, this);
}

std::shared_ptr<Storage> WebGpuBackend::allocate_zeros(size_t bytes) {
  auto s = allocate(bytes);
  forge_wgpu_buffer_fill_zero(gpu(*s).id(), 0, static_cast<uint32_t>(gpu(*s).capacity()));
  return s;
}

void WebGpuBackend::release(uint32_t id, size_t capacity) {
  // Pooled: later allocations of the same size reuse it behind the queued work. The pool
  // keeps at most kPoolBytes: beyond that (a model unloaded, say) buffers are destroyed.
  if (pooled_bytes_ + capacity > kPoolBytes) {
    forge_wgpu_buffer_destroy(id);
    return;
  }
  pool_.emplace(capacity, id);
  pooled_bytes_ += capacity;
}

void WebGpuBackend::write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const GpuStorage& g = gpu(dst);
  if (dst_offset % 4 != 0)
    throw Error(ErrorKind::Unsupported, "webgpu: a write at byte offset " +
                                            std::to_string(dst_offset) + " (not a multiple of 4)");
  if (bytes % 4 == 0) {
    forge_wgpu_buffer_write(g.id(), static_cast<uint32_t>(dst_offset), src,
                            static_cast<uint32_t>(bytes));
    return;
  }
  // A tail of 1-3 bytes (e.g. Q8_0 blocks of 34 bytes): padded with zeros up to a whole
  // word, inside the buffer's capacity (allocations round up to 256 bytes).
  std::vector<unsigned char> padded(round_up(bytes, 4), 0);
  std::memcpy(padded.data(), src, bytes);
  if (dst_offset + padded.size() > g.capacity()) fail("a write past the buffer's end");
  forge_wgpu_buffer_write(g.id(), static_cast<uint32_t>(dst_offset), padded.data(),
                          static_cast<uint32_t>(padded.size()));
}

uint64_t WebGpuBackend::read_async(const Storage& src, size_t offset, size_t bytes) {
  // WebGPU copies whole words: reads start at a multiple of 4 (every tensor forge reads
  // does: its dtype's rows are whole words) and cover whole words.
  if (offset % 4 != 0)
    throw Error(ErrorKind::Unsupported, "webgpu: a read at byte offset " + std::to_string(offset) +
                                            " (not a multiple of 4)");
  const size_t span = round_up(std::max<size_t>(bytes, 4), 4);
  return forge_wgpu_read_start(gpu(src).id(), static_cast<uint32_t>(offset),
                               static_cast<uint32_t>(span));
}

void WebGpuBackend::read_wait(uint64_t ticket, void* dst, size_t bytes) {
  std::vector<unsigned char> tmp(round_up(std::max<size_t>(bytes, 4), 4));  // read_async's span
  if (forge_wgpu_read_wait(static_cast<uint32_t>(ticket), tmp.data(),
                           static_cast<uint32_t>(tmp.size())) != 0)
    check_error();
  std::memcpy(dst, tmp.data(), bytes);
  check_error();
}

void WebGpuBackend::read(const Storage& src, size_t src_offset, void* dst, size_t bytes) {
  if (bytes == 0) return;
  read_wait(read_async(src, src_offset, bytes), dst, bytes);
}

void WebGpuBackend::copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
                         size_t bytes) {
  if (bytes == 0) return;
  if (src_offset % 4 || dst_offset % 4 || bytes % 4)
    throw Error(ErrorKind::Unsupported, "webgpu: a copy of " + std::to_string(bytes) +
                                            " bytes at offsets not multiples of 4");
  forge_wgpu_buffer_copy(gpu(src).id(), static_cast<uint32_t>(src_offset), gpu(dst).id(),
                         static_cast<uint32_t>(dst_offset), static_cast<uint32_t>(bytes));
}

void WebGpuBackend::synchronize() {
  // Reading a word after all queued work waits for it.
  auto s = allocate(4);
  uint32_t word = 0;
  read(*s, 0, &word, 4);
}

DeviceStats WebGpuBackend::stats() const {
  double c[3];
  forge_wgpu_counts(c);
  DeviceStats s;
  s.counted = true;
  s.submits = static_cast<uint64_t>(c[0]);
  s.dispatches = static_cast<uint64_t>(c[1]);
  s.reads = static_cast<uint64_t>(c[2]);
  s.allocations = allocations_;
  return s;
}

void WebGpuBackend::set_setting(const std::string& name, const std::string& value) {
  if (name != "window_bytes") return Backend::set_setting(name, value);
  size_t v = 0;
  try {
    v = value.empty() ? 0 : std::stoull(value);
  } catch (const std::exception&) {
    throw Error(ErrorKind::Format, "webgpu: window_bytes=" + value + ": expected a byte count");
  }
  window_bytes_ = v == 0 ? max_binding_ : std::min(max_binding_, v);
}

std::string WebGpuBackend::setting(const std::string& name) const {
  if (name != "window_bytes") return Backend::setting(name);
  return std::to_string(window_bytes_);
}

void WebGpuBackend::check_error() const {
  char msg[1024];
  if (forge_wgpu_error(msg, sizeof msg)) fail(std::string("the device reported: ") + msg);
}

Binding WebGpuBackend::bind(const Tensor& t, size_t first, size_t bytes) const {
  const GpuStorage& g = gpu(*t.storage());
  const size_t begin = dtype_bytes(t.dtype(), static_cast<int64_t>(t.offset())) + first;
  if (bytes == SIZE_MAX) bytes = t.nbytes() - first;
  const size_t lo = begin / offset_align_ * offset_align_;
  const size_t hi = std::min(g.capacity(), round_up(begin + std::max<size_t>(bytes, 1), 4));
  if (hi - lo > max_binding_)
    throw Error(ErrorKind::Unsupported, "webgpu: a kernel would bind " + std::to_string(hi - lo) +
                                            " bytes, over the device's storage binding limit (" +
                                            std::to_string(max_binding_) + " bytes)");
  return {g.id(), static_cast<uint32_t>(lo), static_cast<uint32_t>(hi - lo),
          static_cast<uint32_t>(begin - lo)};
}

uint32_t WebGpuBackend::pipeline(const char* name) {
  auto it = pipelines_.find(std::string_view(name));
  if (it != pipelines_.end()) return it->second;
  const std::string code = shader_source(name);
  const uint32_t id = forge_wgpu_pipeline(code.c_str());
  pipelines_.emplace(name, id);
  return id;
}

Binding WebGpuBackend::unused() const { return {gpu(*unused_).id(), 0, 256, 0, false}; }

void WebGpuBackend::dispatch(const char* name, const std::vector<Binding>& binds,
                             const std::vector<uint32_t>& params, uint32_t x, uint32_t y,
                             uint32_t z) {
  if (x == 0 || y == 0 || z == 0) return;
  std::vector<uint32_t> flat;
  std::vector<std::shared_ptr<Storage>> copies;  // pooled again after the dispatch is queued
  for (Binding b : binds) {
    for (const Binding& o : binds) {
      if (b.write || !o.write || o.buffer != b.buffer) continue;
      if (b.offset >= o.offset + o.size || o.offset >= b.offset + b.size) continue;
      copies.push_back(allocate(b.size));
      const uint32_t id = gpu(*copies.back()).id();
      forge_wgpu_buffer_copy(b.buffer, b.offset, id, 0, b.size);
      b.buffer = id;
      b.offset = 0;
      break;
    }
    flat.insert(flat.end(), {b.buffer, b.offset, b.size});
  }
  forge_wgpu_dispatch(pipeline(name), flat.data(), static_cast<uint32_t>(binds.size()),
                      params.data(), static_cast<uint32_t>(params.size()), x, y, z);
}

void WebGpuBackend::dispatch_flat(const char* name, const std::vector<Binding>& binds,
                                  const std::vector<uint32_t>& params, uint64_t groups) {
  if (groups == 0) return;
  const uint64_t x = std::min<uint64_t>(groups, max_groups_);
  const uint64_t y = (groups + x - 1) / x;
  if (y > max_groups_) fail("too many workgroups for one dispatch");
  dispatch(name, binds, params, static_cast<uint32_t>(x), static_cast<uint32_t>(y));
}

namespace {

WebGpuBackend& instance() {
  static WebGpuBackend b;  // on first use: the device exists by then
  return b;
}

}  // namespace

}  // namespace forge::webgpu

namespace forge {

// The one place that tells the registry about WebGPU (FORGE_BACKEND(webgpu), CMake).
BackendRegistration webgpu_backend_registration() {
  BackendRegistration r;
  r.name = "webgpu";
  r.open = [](int index) -> Backend& {
    if (index != 0)
      throw Error(ErrorKind::Device,
                  "device webgpu:" + std::to_string(index) + ": there is one WebGPU device");
    return webgpu::instance();
  };
  r.devices = []() -> std::vector<DeviceInfo> {
    if (!forge_wgpu_available()) return {};
    return {webgpu::instance().info()};
  };
  return r;
}

}  // namespace forge
