// NCCL (NVIDIA's collective library), loaded at run time like the driver: forge builds
// without it (Debian does not package it; CI has none), and a GPU machine's copy is found
// by dlopen (FORGE_NCCL_LIBRARY names a path, else libnccl.so.2 on the library path: e.g.
// the one PyTorch's wheels ship). NcclGroup is a DeviceGroup (forge/device_group.h) of
// cuda devices over it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/context.h"
#include "forge/device_group.h"

namespace forge::cuda {

/// "" when NCCL loads, else why not (the names tried and dlopen's reason).
std::string nccl_unavailable_reason();

/// What loading NCCL from `path` alone gives: "" when it loads, else why not (tests: the
/// process's own NCCL is loaded once).
std::string nccl_load_error(const std::string& path);

/// A new communicator id (ncclGetUniqueId): 128 bytes. Error(Unsupported) without NCCL.
std::vector<uint8_t> nccl_new_id();

/// Joins communicator `id` as `rank` of `size` on the context's GPU; returns once every rank
/// has joined. Its sums run on a stream of their own, ordered after the context stream's
/// work by events.
std::unique_ptr<DeviceGroup> nccl_join(const Context& context, const std::vector<uint8_t>& id,
                                       int rank, int size);

}  // namespace forge::cuda
