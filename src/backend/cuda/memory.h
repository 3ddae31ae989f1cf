// Device memory for tensors: a caching allocator over cuMemAlloc and the Storage it hands
// out. Blocks freed by a tensor go back to a cache keyed by their size class and are reused
// by the next allocation of that class: forge queues all work on one stream, so a later use
// is ordered after every earlier one and no wait is needed. A training step allocates the
// same sizes each time, so after the first step it calls cuMemAlloc no more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/context.h"
#include "forge/tensor.h"

namespace forge::cuda {

class Allocator {
 public:
  explicit Allocator(const Context& context) : context_(context) {}
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// The size a request of `bytes` is rounded up to: powers of two from 512 B to 1 MiB,
  /// then multiples of 2 MiB.
  static size_t size_class(size_t bytes);

  /// A block of size_class(bytes) bytes, from the cache or cuMemAlloc. When the device is
  /// out of memory, the cache is freed and the allocation tried again; after that,
  /// Error(Backend) "cuda:N: out of memory: ..." with the device's free and total bytes.
  CUdeviceptr take(size_t bytes);
  /// Returns a block take() gave for `bytes` to the cache.
  void give(CUdeviceptr block, size_t bytes);

  /// Bytes held by live blocks and by the cache.
  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  /// The most bytes live blocks have held at once (size classes, not the cache): what
  /// PyTorch calls max_memory_allocated.
  size_t peak_bytes_in_use() const;
  /// cuMemAlloc calls so far (a steady training step makes none).
  uint64_t device_allocations() const;
  /// Frees every cached block (after the stream's work has finished).
  void release_cached();

 private:
  void release_cached_locked();

  const Context& context_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<CUdeviceptr>> cache_;  // size class -> free blocks
  size_t in_use_ = 0;
  size_t cached_ = 0;
  size_t peak_in_use_ = 0;
  uint64_t device_allocations_ = 0;
};

/// A tensor's memory on a GPU: a block of the allocator, returned to it with the last
/// handle. Not host-addressable.
class CudaStorage : public Storage, public std::enable_shared_from_this<CudaStorage> {
 public:
  CudaStorage(Device device, size_t bytes, Allocator& allocator)
      : Storage(device, bytes), allocator_(allocator), address_(allocator.take(bytes)) {}
  ~CudaStorage() override { allocator_.give(address_, bytes()); }

  CUdeviceptr address() const { return address_; }

 private:
  Allocator& allocator_;
  CUdeviceptr address_;
};

}  // namespace forge::cuda
