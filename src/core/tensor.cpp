#include "forge/tensor.h"

#include <cstring>

#include "forge/error.h"

namespace forge {

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), dtype_(dtype) {}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

namespace {

/// A block dtype's rows must be whole blocks: the last dimension a multiple of the block.
void check_blocks(const Shape& s, DType dtype, const char* fn) {
  if (!dtype_is_block(dtype)) return;
  const int64_t block = dtype_block(dtype);
  if (s.rank() == 0 || s.dim(-1) % block != 0)
    throw Error(ErrorKind::Shape, std::string(fn) + ": " + dtype_name(dtype) + " shape " + s.str() +
                                      " does not end in whole blocks of " + std::to_string(block));
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const Shape s = Shape::checked(shape.dims(), "Tensor::empty");
  check_blocks(s, dtype, "Tensor::empty");
  return Tensor(device_memory(device).allocate(dtype_bytes(dtype, s.numel())), 0, s, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  const Shape s = Shape::checked(shape.dims(), "Tensor::zeros");
  check_blocks(s, dtype, "Tensor::zeros");
  return Tensor(device_memory(device).allocate_zeros(dtype_bytes(dtype, s.numel())), 0, s, dtype);
}

Tensor Tensor::from_bytes(const void* data, size_t bytes, const Shape& shape, DType dtype,
                          Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  if (bytes != t.nbytes())
    throw Error(ErrorKind::Shape, "Tensor::from_bytes: " + std::to_string(bytes) + " bytes for " +
                                      t.str() + ", which takes " + std::to_string(t.nbytes()));
  if (bytes > 0) device_memory(device).write(*t.storage(), 0, data, bytes);
  return t;
}

std::vector<uint8_t> Tensor::to_bytes() const {
  if (!defined()) throw Error(ErrorKind::Shape, "to_bytes: tensor is undefined");
  std::vector<uint8_t> out(nbytes());
  if (!out.empty()) device_memory(device()).read(*storage_, byte_offset(), out.data(), out.size());
  return out;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  const Shape s = Shape::checked(shape.dims(), "Tensor::full");
  return from_vector(std::vector<float>(static_cast<size_t>(s.numel()), value), s, device);
}

namespace {
template <typename T>
Tensor from_host(const std::vector<T>& data, const Shape& shape, Device device) {
  const Shape s = Shape::checked(shape.dims(), "Tensor::from_vector");
  if (static_cast<int64_t>(data.size()) != s.numel())
    throw Error(ErrorKind::Shape, "Tensor::from_vector: " + std::to_string(data.size()) +
                                      " values do not fill shape " + s.str());
  Tensor t = Tensor::empty(s, dtype_of<T>(), device);
  if (!data.empty()) device_memory(device).write(*t.storage(), 0, data.data(), t.nbytes());
  return t;
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& data, const Shape& shape, Device device) {
  return from_host(data, shape, device);
}
Tensor Tensor::from_vector(const std::vector<uint32_t>& data, const Shape& shape, Device device) {
  return from_host(data, shape, device);
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape s = Shape::checked(shape.dims(), "reshape");
  if (s.numel() != numel())
    throw Error(ErrorKind::Shape, "reshape: cannot view " + shape_.str() + " as " + s.str() +
                                      " (element counts differ)");
  check_blocks(s, dtype_, "reshape");
  return Tensor(storage_, offset_, s, dtype_);
}

Tensor Tensor::narrow_rows(int64_t start, int64_t count) const {
  if (rank() == 0) throw Error(ErrorKind::Shape, "narrow_rows: tensor has rank 0");
  if (start < 0 || count < 0 || start > shape_[0] || count > shape_[0] - start)
    throw Error(ErrorKind::Range, "narrow_rows: rows [" + std::to_string(start) + ", " +
                                      std::to_string(start + count) + ") outside " + shape_.str());
  std::vector<int64_t> dims = shape_.dims();
  dims[0] = count;
  const int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  if (dtype_is_block(dtype_) &&
      ((start * row) % dtype_block(dtype_) != 0 || (count * row) % dtype_block(dtype_) != 0))
    throw Error(ErrorKind::Shape, "narrow_rows: rows [" + std::to_string(start) + ", " +
                                      std::to_string(start + count) + ") of " + str() +
                                      " cut a block of " + std::to_string(dtype_block(dtype_)));
  return Tensor(storage_, offset_ + static_cast<size_t>(start * row), Shape(dims), dtype_);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (!defined()) throw Error(ErrorKind::Shape, "to_vector: tensor is undefined");
  if (dtype_ != dtype_of<T>())
    throw Error(ErrorKind::DType, std::string("to_vector: tensor is ") + dtype_name(dtype_) +
                                      ", asked for " + dtype_name(dtype_of<T>()));
  std::vector<T> out(static_cast<size_t>(numel()));
  if (!out.empty()) device_memory(device()).read(*storage_, byte_offset(), out.data(), nbytes());
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<uint32_t> Tensor::to_vector<uint32_t>() const;

Tensor Tensor::to(Device device) const {
  if (!defined()) throw Error(ErrorKind::Shape, "to: tensor is undefined");
  Tensor out = Tensor::empty(shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) throw Error(ErrorKind::Shape, "copy_from: tensor is undefined");
  if (src.shape() != shape_ || src.dtype() != dtype_)
    throw Error(ErrorKind::Shape, "copy_from: " + src.str() + " into " + str());
  if (nbytes() == 0) return;
  if (src.device() == device()) {
    device_memory(device()).copy(*src.storage(), src.byte_offset(), *storage_, byte_offset(),
                                 nbytes());
  } else {
    std::vector<unsigned char> host(nbytes());
    device_memory(src.device()).read(*src.storage(), src.byte_offset(), host.data(), nbytes());
    device_memory(device()).write(*storage_, byte_offset(), host.data(), nbytes());
  }
}

namespace {
template <typename T>
void copy_host(Tensor& t, const std::vector<T>& data) {
  if (!t.defined()) throw Error(ErrorKind::Shape, "copy_from: tensor is undefined");
  if (t.dtype() != dtype_of<T>())
    throw Error(ErrorKind::DType, "copy_from: host data type does not match " + t.str());
  if (static_cast<int64_t>(data.size()) != t.numel())
    throw Error(ErrorKind::Shape,
                "copy_from: " + std::to_string(data.size()) + " values for " + t.str());
  if (data.empty()) return;
  device_memory(t.device()).write(*t.storage(), t.byte_offset(), data.data(), t.nbytes());
}
}  // namespace

void Tensor::copy_from(const std::vector<float>& data) { copy_host(*this, data); }
void Tensor::copy_from(const std::vector<uint32_t>& data) { copy_host(*this, data); }

template <typename T>
const T* Tensor::data() const {
  if (!defined()) throw Error(ErrorKind::Shape, "data: tensor is undefined");
  if (dtype_ != dtype_of<T>())
    throw Error(ErrorKind::DType, std::string("data: tensor is ") + dtype_name(dtype_) +
                                      ", asked for " + dtype_name(dtype_of<T>()));
  void* base = storage_->host_ptr();
  if (!base) throw Error(ErrorKind::Device, "data: " + str() + " is not in host memory");
  return static_cast<const T*>(base) + offset_;
}
template <typename T>
T* Tensor::data() {
  return const_cast<T*>(static_cast<const Tensor*>(this)->data<T>());
}
template const float* Tensor::data<float>() const;
template const uint32_t* Tensor::data<uint32_t>() const;

const std::byte* Tensor::host_bytes() const {
  if (!defined()) throw Error(ErrorKind::Shape, "host_bytes: tensor is undefined");
  void* base = storage_->host_ptr();
  if (!base) throw Error(ErrorKind::Device, "host_bytes: " + str() + " is not in host memory");
  return static_cast<const std::byte*>(base) + byte_offset();
}
template float* Tensor::data<float>();
template uint32_t* Tensor::data<uint32_t>();

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return std::string("Tensor(") + dtype_name(dtype_) + " " + shape_.str() + " on " +
         device().str() + ")";
}

}  // namespace forge
