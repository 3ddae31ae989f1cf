// Host memory for CPU tensors: 64-byte aligned blocks, with large blocks recycled.
//
// Why a cache: in this kind of VM the first touch of fresh memory costs ~15 us per 4 KiB page
// (a new 51 MB buffer takes ~0.2 s to fill), and glibc returns blocks above its mmap
// threshold (at most 32 MiB) to the kernel on free. Training and prefill allocate the same
// large intermediates (logits, their gradients, activations) every step, so large blocks are
// kept on free and handed out again for the same size class. Large blocks are also mapped
// 2 MiB-aligned with MADV_HUGEPAGE, which makes their first touch ~40x cheaper where
// transparent huge pages are available.
#pragma once

#include <cstddef>

namespace forge::cpu {

/// A block of at least `bytes` bytes (+ 64 bytes of readable padding for SIMD tails),
/// 64-byte aligned, or nullptr when out of memory. `zero` fills it with zeros.
void* host_alloc(size_t bytes, bool zero);
/// Returns a block from host_alloc(bytes, ...) (same `bytes`).
void host_free(void* ptr, size_t bytes);

/// Bytes held by the cache of freed large blocks (for tests and stats).
size_t host_cached_bytes();
/// Releases every cached block to the system.
void host_trim();

}  // namespace forge::cpu
