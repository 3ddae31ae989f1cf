#include "backend/cuda/memory.h"

#include <algorithm>
#include <string>

#include "forge/error.h"

namespace forge::cuda {

Allocator::~Allocator() { release_cached(); }

size_t Allocator::size_class(size_t bytes) {
  constexpr size_t kSmallest = 512;
  constexpr size_t kSmallLimit = size_t{1} << 20;
  constexpr size_t kLargeStep = size_t{2} << 20;
  if (bytes <= kSmallLimit) {
    size_t c = kSmallest;
    while (c < bytes) c <<= 1;
    return c;
  }
  if (bytes > SIZE_MAX - kLargeStep)
    throw Error(ErrorKind::Backend, "cuda: an allocation of " + std::to_string(bytes) +
                                        " bytes is past any device's memory");
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

CUdeviceptr Allocator::take(size_t bytes) {
  const size_t c = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(c);
  if (it != cache_.end() && !it->second.empty()) {
    const CUdeviceptr p = it->second.back();
    it->second.pop_back();
    cached_ -= c;
    in_use_ += c;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    return p;
  }
  context_.make_current();
  CUdeviceptr p = 0;
  CUresult r = driver().mem_alloc(&p, c);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && cached_ > 0) {
    release_cached_locked();
    r = driver().mem_alloc(&p, c);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free = 0, total = 0;
    driver().mem_get_info(&free, &total);
    throw Error(ErrorKind::Backend,
                "cuda:" + std::to_string(context_.ordinal()) +
                    ": out of memory: " + std::to_string(bytes) + " bytes asked, " +
                    std::to_string(free >> 20) + " MiB free of " + std::to_string(total >> 20) +
                    " MiB, forge holds " + std::to_string(in_use_ >> 20) + " MiB");
  }
  check(r, "cuMemAlloc_v2");
  ++device_allocations_;
  in_use_ += c;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return p;
}

void Allocator::give(CUdeviceptr block, size_t bytes) {
  const size_t c = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  cache_[c].push_back(block);
  in_use_ -= c;
  cached_ += c;
}

size_t Allocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

size_t Allocator::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

size_t Allocator::peak_bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return peak_in_use_;
}

uint64_t Allocator::device_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return device_allocations_;
}

void Allocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void Allocator::release_cached_locked() {
  if (cache_.empty()) return;
  context_.make_current();
  driver().stream_synchronize(context_.stream());  // queued work may still use a block
  for (auto& [c, blocks] : cache_)
    for (CUdeviceptr p : blocks) driver().mem_free(p);
  cache_.clear();
  cached_ = 0;
}

}  // namespace forge::cuda
