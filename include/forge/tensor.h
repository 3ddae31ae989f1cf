// Tensor: shared storage + element offset + shape + dtype. Always contiguous row-major.
//
// Copying a Tensor copies the handle, not the data (like a shared_ptr). Views
// (reshape, narrow_rows) share storage and cost nothing. Kernels write into
// tensors that the ops layer allocated, so a Tensor's data is mutable through any handle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "forge/device.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge {

/// A block of device memory owned by a backend. CPU storage is 64-byte aligned host memory.
class Storage {
 public:
  Storage(Device device, size_t bytes) : device_(device), bytes_(bytes) {}
  virtual ~Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  size_t bytes() const { return bytes_; }
  /// Host-addressable pointer, or nullptr for device memory the host cannot address.
  virtual void* host_ptr() { return nullptr; }

 private:
  Device device_;
  size_t bytes_;
};

/// What core needs of a device: its memory. Every backend implements it (forge/backend.h),
/// and the backend registry finds the one serving a device.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// Uninitialized storage of `bytes` bytes on this device.
  virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;
  /// Zero-filled storage.
  virtual std::shared_ptr<Storage> allocate_zeros(size_t bytes) = 0;
  /// Host <-> device copies at byte offsets into a storage.
  virtual void write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) = 0;
  virtual void read(const Storage& src, size_t src_offset, void* dst, size_t bytes) = 0;
  /// Device-local copy between storages of this device.
  virtual void copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
                    size_t bytes) = 0;
};

/// The memory of `device`, from the backend registry (src/backend/registry.cpp), created on
/// first use. Error(Device) if no registered backend has that device.
DeviceMemory& device_memory(Device device);

class Tensor {
 public:
  Tensor() = default;  // an empty handle: defined() == false
  Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype);

  /// Uninitialized tensor on `device` (allocated by that device's backend).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  /// Copies `data` (size must equal shape.numel(), else Error(Shape)).
  static Tensor from_vector(const std::vector<float>& data, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<uint32_t>& data, const Shape& shape,
                            Device device = Device::cpu());
  /// A tensor of any dtype from its raw bytes (block dtypes: dtype.h's layouts); bytes must
  /// be exactly what shape and dtype take (Error(Shape) otherwise).
  static Tensor from_bytes(const void* data, size_t bytes, const Shape& shape, DType dtype,
                           Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  int64_t numel() const { return shape_.numel(); }
  size_t rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  size_t offset() const { return offset_; }  // in elements (whole blocks for a block dtype)
  size_t byte_offset() const { return dtype_bytes(dtype_, static_cast<int64_t>(offset_)); }
  size_t nbytes() const { return dtype_bytes(dtype_, numel()); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  /// View with another shape of the same element count (Error(Shape) otherwise, and for a
  /// block dtype when the new last dimension is not whole blocks).
  Tensor reshape(const Shape& shape) const;
  /// View of rows [start, start+count) along the first dimension (of a rank-1 block tensor:
  /// whole blocks only).
  Tensor narrow_rows(int64_t start, int64_t count) const;

  /// Reads the data to the host (flushing pending GPU work). Error(DType) if T mismatches.
  template <typename T>
  std::vector<T> to_vector() const;
  /// The raw bytes (any dtype), read to the host.
  std::vector<uint8_t> to_bytes() const;
  /// Deep copy onto `device` (a copy even when it is already there).
  Tensor to(Device device) const;
  Tensor clone() const { return to(device()); }
  /// Overwrites this tensor's elements from host memory (size must match numel).
  void copy_from(const std::vector<float>& data);
  void copy_from(const std::vector<uint32_t>& data);
  /// Copies another tensor's elements into this one (same shape and dtype; any devices).
  void copy_from(const Tensor& src);

  /// Host pointers for CPU tensors (Error(Device) for other devices, Error(DType) on mismatch).
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  /// The first byte of a CPU tensor of any dtype (the 16-bit and block dtypes' kernels read
  /// them so); Error(Device) for other devices.
  const std::byte* host_bytes() const;

  /// A human-readable summary: "Tensor(f32 [2, 3] on cpu)".
  std::string str() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace forge
