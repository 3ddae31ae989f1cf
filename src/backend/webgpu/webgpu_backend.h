// The WebGPU backend (wasm builds): WGSL compute shaders (shaders/*.wgsl, embedded at build
// time) run through the JavaScript glue of library_webgpu.js on the GPUDevice the host page
// or node test acquired. Inference ops only (the op table's forward ops), f32 and Q8_0
// weights; a tensor larger than one storage binding is bound in windows of rows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "forge/backend.h"

namespace forge::webgpu {

/// One GPUBuffer (a handle of library_webgpu.js), returned to the backend's pool when freed.
class GpuStorage : public Storage {
 public:
  GpuStorage(Device device, size_t bytes, uint32_t id, size_t capacity, class WebGpuBackend* owner)
      : Storage(device, bytes), id_(id), capacity_(capacity), owner_(owner) {}
  ~GpuStorage() override;
  uint32_t id() const { return id_; }
  size_t capacity() const { return capacity_; }

 private:
  uint32_t id_;
  size_t capacity_;  // the buffer's size: bytes rounded up to 256
  class WebGpuBackend* owner_;
};

/// A binding of part of a tensor: the buffer, its 256-aligned window, and where the tensor
/// part starts inside the window (in bytes).
struct Binding {
  uint32_t buffer = 0, offset = 0, size = 0;
  uint32_t first_byte = 0;
  bool write = false;  // the shader's read_write binding (its outputs); others are read-only
};

/// `b` marked as a kernel's output.
inline Binding output(Binding b) {
  b.write = true;
  return b;
}

class WebGpuBackend : public Backend {
 public:
  WebGpuBackend();
  ~WebGpuBackend() override;

  DeviceInfo info() const override;
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  std::shared_ptr<Storage> allocate_zeros(size_t bytes) override;
  void write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) override;
  void read(const Storage& src, size_t src_offset, void* dst, size_t bytes) override;
  void copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
            size_t bytes) override;
  void synchronize() override;
  uint64_t read_async(const Storage& src, size_t offset, size_t bytes) override;
  void read_wait(uint64_t ticket, void* dst, size_t bytes) override;
  DeviceStats stats() const override;
  void set_setting(const std::string& name, const std::string& value) override;
  std::string setting(const std::string& name) const override;
  std::vector<std::string> setting_names() const override { return {"window_bytes"}; }

  /// The largest byte range one kernel binds: the device's maxStorageBufferBindingSize.
  size_t max_binding() const { return max_binding_; }
  /// The bytes of a weight window: tables and transposed weight matrices larger than this are
  /// bound a window of rows at a time (embedding, matmul). max_binding(), or less through the
  /// setting "window_bytes" (the op harness's windowed runs); at least one row.
  size_t window_bytes() const { return window_bytes_; }
  /// A binding of bytes [first, first + bytes) of t's storage; Error(Unsupported) naming the
  /// limit if they do not fit in one binding.
  Binding bind(const Tensor& t, size_t first = 0, size_t bytes = SIZE_MAX) const;
  /// Decode products (a few rows) with K split across a workgroup and partial sums in shared
  /// memory (a GPU's), or a thread per output with no barriers (a CPU adapter's: SwiftShader
  /// runs barriers slowly). By the adapter; FORGE_WEBGPU_DECODE=split|rows forces one (the
  /// tests run both).
  bool split_decode() const { return split_decode_; }
  /// A small read-only binding for a shader's unused inputs.
  Binding unused() const;
  /// Runs WGSL `name` (shaders/<name>.wgsl) on (x, y, z) workgroups. A read-only binding that
  /// overlaps an output's (an in-place op: add_) is read from a copy: WebGPU forbids one
  /// dispatch binding the same bytes writable and read-only.
  void dispatch(const char* name, const std::vector<Binding>& binds,
                const std::vector<uint32_t>& params, uint32_t x, uint32_t y = 1, uint32_t z = 1);
  /// Workgroup counts for `groups` workgroups in two dimensions under the per-dimension limit.
  void dispatch_flat(const char* name, const std::vector<Binding>& binds,
                     const std::vector<uint32_t>& params, uint64_t groups);
  /// Throws Error(Backend) with the device's first reported error, if any.
  void check_error() const;

  void release(uint32_t id, size_t capacity);

 private:
  void register_kernels();
  uint32_t pipeline(const char* name);

  std::string adapter_;
  size_t max_binding_ = 0, window_bytes_ = 0, max_buffer_ = 0;
  uint32_t max_groups_ = 65535, offset_align_ = 256;
  bool f16_ = false, subgroups_ = false, split_decode_ = true;
  std::map<std::string, uint32_t, std::less<>> pipelines_;  // by shader name
  std::multimap<size_t, uint32_t> pool_;                    // free buffers by capacity
  size_t pooled_bytes_ = 0;                                 // their capacities
  static constexpr size_t kPoolBytes = size_t{512} << 20;   // the pool's most
  std::shared_ptr<Storage> unused_;
  uint64_t allocations_ = 0;
};

}  // namespace forge::webgpu
