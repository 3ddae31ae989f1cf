// See host_memory.h for why large blocks are cached and mapped with huge pages.
#include "backend/cpu/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace forge::cpu {
namespace {

// Blocks from 256 KiB up are "large": mapped directly (starting on a 2 MiB boundary) and
// recycled. Their size class is rounded to 64 KiB, not 2 MiB: a partly used huge page would
// be resident in full, and GPT-2's weight matrices would waste ~40 MB that way.
// Under AddressSanitizer every block goes through malloc, so that ASan sees overruns. So it
// does in wasm: its memory has no huge pages and never shrinks, and emscripten's mmap (a
// JavaScript system call, run on the main thread) blocks in a build with threads.
#if defined(__SANITIZE_ADDRESS__) || defined(__EMSCRIPTEN__)
constexpr size_t kLargeMin = SIZE_MAX;
#else
constexpr size_t kLargeMin = size_t{256} << 10;
#endif
constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kLargeGrain = size_t{64} << 10;

size_t padded_small(size_t bytes) { return (bytes + 127) / 64 * 64; }
size_t padded_large(size_t bytes) {
  return (bytes + 64 + kLargeGrain - 1) / kLargeGrain * kLargeGrain;
}

class LargeCache {
 public:
  void* take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = free_.find(size);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= size;
    return p;
  }

  // Keeps the block unless that would hold more than the cap; then the block goes back to
  // the system (the cache never grows a process beyond what it used at its peak plus cap).
  void give(void* p, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + size <= cap()) {
        free_.emplace(size, p);
        cached_ += size;
        return;
      }
    }
    munmap(p, size);
  }

  size_t cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }

  void trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [size, p] : free_) munmap(p, size);
    free_.clear();
    cached_ = 0;
  }

 private:
  // An eighth of physical memory, at most 2 GiB.
  static size_t cap() {
    static const size_t value = [] {
      const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
      const size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * page : 0;
      const size_t limit = size_t{2} << 30;
      return phys / 8 < limit ? phys / 8 : limit;
    }();
    return value;
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

LargeCache& cache() {
  static LargeCache* c = new LargeCache;  // never destroyed: tensors may outlive statics
  return *c;
}

void* map_large(size_t size) {
  // Over-map by 2 MiB and cut to a 2 MiB-aligned range so the kernel can back it with huge
  // pages.
  const size_t span = size + kHuge;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHuge - 1) / kHuge * kHuge;
  if (aligned > base) munmap(raw, aligned - base);
  const uintptr_t end = base + span, used_end = aligned + size;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);  // advisory: ignored where THP is off
#endif
  return p;
}

}  // namespace

void* host_alloc(size_t bytes, bool zero) {
  if (bytes < kLargeMin) {
    const size_t padded = padded_small(bytes);
    void* p = std::aligned_alloc(64, padded);
    if (p && zero) std::memset(p, 0, padded);
    return p;
  }
  const size_t size = padded_large(bytes);
  void* p = cache().take(size);
  if (p) {
    if (zero) std::memset(p, 0, size);
    return p;
  }
  // Fresh anonymous mappings are already zero.
  return map_large(size);
}

void host_free(void* ptr, size_t bytes) {
  if (!ptr) return;
  if (bytes < kLargeMin) {
    std::free(ptr);
    return;
  }
  cache().give(ptr, padded_large(bytes));
}

size_t host_cached_bytes() { return cache().cached(); }
void host_trim() { cache().trim(); }

}  // namespace forge::cpu
