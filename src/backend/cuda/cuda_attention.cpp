// Fused attention on CUDA: the forward's kernel choice (decode's split keys, the 64-query
// tiles of prefill and training, their keys optionally split where the tiles alone leave the
// GPU a long tail, one block per query otherwise) and training's backward
// (kernels/attention_tiled_bwd.cu at head dimension 64 except under tf32; other cases decline,
// and the ops layer composes attention_bwd from its parts). Under precision bf16 (tf32: with
// FORGE_CUDA_TC_ATTENTION=1) the 64-row tiles take their tensor-core twins. Inputs were
// validated by the ops layer.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "backend/cuda/cuda_backend.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {
constexpr Dim3 kBlock{256};
constexpr int64_t kTileRows = 64;  // forge_attention_tiled's FORGE_FA_ROWS

// Under precision bf16 the 64-row tiles' products run on tensor cores with bf16 operands
// (kernels/attention_tc.cu) unless FORGE_CUDA_TC_ATTENTION=0; under tf32 with tf32 operands
// only with FORGE_CUDA_TC_ATTENTION=1, until they have been measured on a GPU
// (docs/PERFORMANCE.md, session 35). The kernels by operand mode: 0 fp32 (CUDA cores),
// 1 bf16, 2 tf32. Names are literals: the profiler and the kernel table keep the pointers.
int tc_attention_mode(GemmShape::Precision p) {
  const char* v = std::getenv("FORGE_CUDA_TC_ATTENTION");
  if (v && std::strcmp(v, "0") == 0) return 0;
  if (p == GemmShape::Precision::bf16) return 1;
  return p == GemmShape::Precision::tf32 && v && std::strcmp(v, "1") == 0 ? 2 : 0;
}
constexpr const char* kTiled64[] = {"forge_attention_tiled64", "forge_attention_tiled64_bf16",
                                    "forge_attention_tiled64_tf32"};
constexpr const char* kBwdDq[] = {"forge_attention_bwd_dq", "forge_attention_bwd_dq_bf16",
                                  "forge_attention_bwd_dq_tf32"};
constexpr const char* kBwdDkv[] = {"forge_attention_bwd_dkv", "forge_attention_bwd_dkv_bf16",
                                   "forge_attention_bwd_dkv_tf32"};

// Key tiles that query tile q (rows 64 q ..) of T queries after pos cached ones walks.
int64_t key_tiles(int64_t q, int64_t T, int64_t pos) {
  return (pos + std::min((q + 1) * kTileRows, T) + kTileRows - 1) / kTileRows;
}

// forge_attention_tiled64's split keys (see its comment): 0 (one block per query tile) when
// the blocks fill the GPU evenly anyway, else chunks of S key tiles, S = max(2, U / (2 * slots))
// rounded up, where U is all tiles' key tiles over the heads and slots = 2 blocks per SM (its
// launch bounds). Each block then walks at most S tiles while the average slot walks U / slots,
// so the last blocks to start end about when the rest do.
int64_t split_chunk_tiles(int64_t heads, int64_t T, int64_t pos, int multiprocessors) {
  const int64_t n_tiles = (T + kTileRows - 1) / kTileRows;
  int64_t units = 0;
  for (int64_t q = 0; q < n_tiles; ++q) units += key_tiles(q, T, pos);
  units *= heads;
  const int64_t slots = 2 * std::max(multiprocessors, 1);
  const int64_t chunk = std::max<int64_t>(2, (units + 2 * slots - 1) / (2 * slots));
  return chunk < key_tiles(n_tiles - 1, T, pos) ? chunk : 0;
}

// Split keys are on unless FORGE_CUDA_SPLIT_ATTENTION=0 (a batch-1 prefill of 1024 tokens was
// 1.12x faster with them on an H100: docs/PERFORMANCE.md, session 33); a chunk size as below
// switches them on whatever that says.
bool split_keys_on() {
  const char* on = std::getenv("FORGE_CUDA_SPLIT_ATTENTION");
  const char* chunk = std::getenv("FORGE_CUDA_ATTENTION_CHUNK_TILES");
  return !(on && std::strcmp(on, "0") == 0) || (chunk && *chunk);
}

// FORGE_CUDA_ATTENTION_CHUNK_TILES=S forces chunks of S key tiles where keys may be split (0:
// one block per tile), to measure the choice above.
std::optional<int64_t> forced_chunk_tiles() {
  const char* v = std::getenv("FORGE_CUDA_ATTENTION_CHUNK_TILES");
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < 0 || n > (1 << 20))
    throw Error(ErrorKind::Format, std::string("FORGE_CUDA_ATTENTION_CHUNK_TILES: '") + v +
                                       "' is not a count of key tiles (0 to 1048576)");
  return n;
}

// The blocks of one head's tiles: their chunks (one each when chunk_tiles is 0).
int64_t split_items(int64_t T, int64_t pos, int64_t chunk_tiles) {
  const int64_t n_tiles = (T + kTileRows - 1) / kTileRows;
  if (chunk_tiles == 0) return n_tiles;
  int64_t items = 0;
  for (int64_t q = 0; q < n_tiles; ++q)
    items += (key_tiles(q, T, pos) + chunk_tiles - 1) / chunk_tiles;
  return items;
}
}  // namespace

// ---- forward ----------------------------------------------------------------------------

void CudaBackend::attention(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                            int64_t pos, Tensor& out) {
  const bool caches = k_cache.defined();
  run_attention(qkv, n_head, caches ? &k_cache : nullptr, caches ? &v_cache : nullptr, pos, nullptr,
                out);
}

void CudaBackend::attention_at(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                               const Tensor& pos, Tensor& out) {
  run_attention(qkv, n_head, &k_cache, &v_cache, 0, &pos, out);
}

// Lets `kernel` take `bytes` of dynamic shared memory: beyond the 48 KiB default it asks for
// the device's opt-in maximum once (`limit` remembers what the kernel has now).
void CudaBackend::allow_shared_memory(const char* kernel, int64_t bytes, const std::string& what) {
  int& limit = smem_limits_.try_emplace(kernel, 48 << 10).first->second;
  if (bytes > attention_smem_optin_)
    throw Error(ErrorKind::Unsupported, "attention on cuda: " + what + " need " +
                                            std::to_string(bytes >> 10) +
                                            " KiB of shared memory per block; the GPU has " +
                                            std::to_string(attention_smem_optin_ >> 10) + " KiB");
  if (bytes <= limit) return;
  ctx_->make_current();
  check(driver().func_set_attribute(kernels_->function(kernel),
                                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    attention_smem_optin_),
        "cuFuncSetAttribute");
  limit = attention_smem_optin_;
}

void CudaBackend::run_attention(const Tensor& qkv, int64_t n_head, Tensor* k_cache, Tensor* v_cache,
                                int64_t pos, const Tensor* pos_tensor, Tensor& out) {
  constexpr int64_t kMaxHeadDim = 128;  // forge_attention's FORGE_ATTN_MAX_HD
  constexpr int64_t kWarps = 8;         // FORGE_ATTN_WARPS (256 threads)
  constexpr int64_t kSplitKeys = 64;    // forge_attention_split's FORGE_SPLIT_KEYS
  constexpr int64_t kSplitMaxQueries = 8;
  const int64_t B = qkv.rank() == 3 ? qkv.dim(0) : 1, T = qkv.dim(-2);
  const int64_t hd = qkv.dim(-1) / 3 / n_head;
  if (hd > kMaxHeadDim)
    throw Error(ErrorKind::Unsupported, "attention on cuda: head dimension " + std::to_string(hd) +
                                            " (at most " + std::to_string(kMaxHeadDim) + ")");
  if (B * n_head > 65535 || T > INT_MAX)
    throw Error(ErrorKind::Unsupported, "attention on cuda: " + std::to_string(B * n_head) +
                                            " heads in a batch (at most 65535)");
  const int64_t cap = k_cache ? k_cache->dim(1) : T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const CUdeviceptr pos_ptr = pos_tensor ? ptr(*pos_tensor) : 0;
  const CUdeviceptr kc = k_cache ? ptr(*k_cache) : 0;
  const CUdeviceptr vc = v_cache ? ptr(*v_cache) : 0;
  // A decode step's few queries over a cache: the keys split over blocks of 64
  // (attention_split.cu), which also store the new keys and values.
  const int64_t C = n_head * hd;
  const bool split = k_cache && T <= kSplitMaxQueries && hd % 4 == 0 &&
                     T * B * n_head <= kTicketCounters && (ptr(qkv) & 15) == 0 && (kc & 15) == 0 &&
                     (vc & 15) == 0 && C % 4 == 0;
  if (split) {
    const int64_t chunks = (cap + kSplitKeys - 1) / kSplitKeys;
    Scratch partials(*this,
                     static_cast<size_t>(T * B * n_head * chunks * (hd + 2)) * sizeof(float));
    kernels_->launch("forge_attention_split",
                     Dim3{static_cast<unsigned>(chunks), static_cast<unsigned>(T),
                          static_cast<unsigned>(B * n_head)},
                     Dim3{256}, 0, ptr(qkv), kc, vc, ptr(out), B, T, n_head, hd, cap, pos, pos_ptr,
                     scale, partials.get(), ticket_counters_);
    return;
  }
  // A whole tile of queries or more: the tiled kernel (attention_tiled.cu), whose shared
  // memory holds 64-row tiles of Q, K, V and P; else one block per query (attention.cu),
  // whose shared memory holds the query, the warps' partial outputs and all its scores.
  // Head dimension 64 (GPT-2's) with aligned rows: its float4 variant (attention_tiled64.cu).
  const bool tiled = T >= kTileRows && hd % 16 == 0;
  const bool tiled64 = tiled && hd == 64 && (ptr(qkv) & 15) == 0 && (ptr(out) & 15) == 0 &&
                       (kc & 15) == 0 && (vc & 15) == 0;
  const int tc = tiled64 ? tc_attention_mode(precision_) : 0;
  const char* kernel =
      tiled64 ? kTiled64[tc] : (tiled ? "forge_attention_tiled" : "forge_attention");
  int64_t smem = 0;
  if (tiled64) {
    smem = ((tc == 0 ? 3 * 68 + 64 : 4 * 68) * kTileRows) * static_cast<int64_t>(sizeof(float));
    allow_shared_memory(kernel, smem,
                        "tiles of " + std::to_string(kTileRows) + " rows of head dimension 64");
  } else if (tiled) {
    smem = (3 * (hd + 1) + 65) * kTileRows * static_cast<int64_t>(sizeof(float));
    allow_shared_memory(
        kernel, smem,
        "tiles of " + std::to_string(kTileRows) + " rows of head dimension " + std::to_string(hd));
  } else {
    smem = (cap + (1 + kWarps) * kMaxHeadDim) * static_cast<int64_t>(sizeof(float));
    allow_shared_memory(kernel, smem, std::to_string(cap) + " key positions");
  }
  if (k_cache)
    kernels_->launch("forge_kv_store", grid_for(B * n_head * T * hd), kBlock, 0, ptr(qkv), kc, vc,
                     B, T, n_head, hd, cap, pos, pos_ptr);
  if (tiled64) {
    // Split keys need pos on the host (the chunk count depends on it) and a counter per tile.
    const int64_t n_tiles = (T + kTileRows - 1) / kTileRows;
    const bool can_split = pos_tensor == nullptr && B * n_head * n_tiles <= kTicketCounters;
    const int64_t chunk_tiles =
        can_split && split_keys_on()
            ? forced_chunk_tiles().value_or(split_chunk_tiles(B * n_head, T, pos, multiprocessors_))
            : 0;
    const int64_t items = split_items(T, pos, chunk_tiles);
    constexpr int64_t kPartFloats = 2 * 64 + 64 * 64;  // FORGE_FA64_PART
    std::optional<Scratch> partials;
    if (chunk_tiles > 0)
      partials.emplace(*this,
                       static_cast<size_t>(B * n_head * items * kPartFloats) * sizeof(float));
    kernels_->launch(kernel, Dim3{static_cast<unsigned>(items), static_cast<unsigned>(B * n_head)},
                     Dim3{static_cast<unsigned>(32 * kWarps)}, static_cast<size_t>(smem), ptr(qkv),
                     kc, vc, ptr(out), B, T, n_head, hd, cap, pos, pos_ptr, scale, chunk_tiles,
                     partials ? partials->get() : CUdeviceptr{0}, ticket_counters_);
    return;
  }
  const auto grid_x = static_cast<unsigned>(tiled ? (T + kTileRows - 1) / kTileRows : T);
  kernels_->launch(kernel, Dim3{grid_x, static_cast<unsigned>(B * n_head)},
                   Dim3{static_cast<unsigned>(32 * kWarps)}, static_cast<size_t>(smem), ptr(qkv),
                   kc, vc, ptr(out), B, T, n_head, hd, cap, pos, pos_ptr, scale);
}

// ---- backward ---------------------------------------------------------------------------

namespace {
constexpr int64_t kBwdTileRows = 64;                   // FORGE_FA_ROWS
constexpr int64_t kBwdTileFloats = kBwdTileRows * 68;  // a [64][FORGE_FA64_LD] tile
constexpr int64_t kBwdDqSmem = 5 * kBwdTileFloats * sizeof(float);
constexpr int64_t kBwdDkvSmem = (6 * kBwdTileFloats + 2 * kBwdTileRows) * sizeof(float);
}  // namespace

// inputs: qkv [B, T, 3C], out, dy [B, T, C]; output dqkv [B, T, 3C]. The tiled kernels take
// head dimension 64 with 16-byte aligned rows and their shared memory within the device's.
// Taken by default: a GPT-2 step in fp32 was 5-6% faster with them (docs/PERFORMANCE.md,
// session 29). Under tf32 only as tensor-core twins (FORGE_CUDA_TC_ATTENTION=1): the fp32
// kernels were 4% slower there than the composition, whose [T, T] products run on tensor cores;
// under bf16 those products would round every [T, T] matrix first. FORGE_CUDA_TILED_ATTENTION_BWD=1
// (or 0) takes them (or not) whatever the precision.
bool CudaBackend::takes_attention_bwd(const OpCall& c) const {
  const char* force = std::getenv("FORGE_CUDA_TILED_ATTENTION_BWD");
  const bool on = force && *force ? std::strcmp(force, "1") == 0
                                  : precision_ != GemmShape::Precision::tf32 ||
                                        tc_attention_mode(precision_) != 0;
  if (!on) return false;
  const Tensor& qkv = c.in(0);
  const int64_t n_head = c.attrs.n_head;
  const int64_t B = qkv.rank() == 3 ? qkv.dim(0) : 1, T = qkv.dim(-2);
  if (qkv.dim(-1) != 3 * 64 * n_head || B * n_head > 65535 || T > INT_MAX) return false;
  if (kBwdDkvSmem > attention_smem_optin_) return false;
  for (const Tensor* t : {&qkv, &c.in(1), &c.in(2), static_cast<const Tensor*>(&c.out(0))})
    if ((address(*t) & 15) != 0) return false;
  return true;
}

void CudaBackend::attention_bwd(const OpCall& c) {
  const Tensor &qkv = c.in(0), &out = c.in(1), &dy = c.in(2);
  Tensor& dqkv = c.out(0);
  const int64_t n_head = c.attrs.n_head;
  const int64_t B = qkv.rank() == 3 ? qkv.dim(0) : 1, T = qkv.dim(-2);
  const float scale = 1.0f / std::sqrt(64.0f);
  const int tc = tc_attention_mode(precision_);
  const char *dq = kBwdDq[tc], *dkv = kBwdDkv[tc];
  allow_shared_memory(dq, kBwdDqSmem, "the gradient's tiles");
  allow_shared_memory(dkv, kBwdDkvSmem, "the gradient's tiles");
  // Each row's lse and D_t = dy_t . out_t, from the first kernel to the second.
  Scratch stats(*this, static_cast<size_t>(2 * B * n_head * T) * sizeof(float));
  const Dim3 grid{static_cast<unsigned>((T + kBwdTileRows - 1) / kBwdTileRows),
                  static_cast<unsigned>(B * n_head)};
  kernels_->launch(dq, grid, Dim3{256}, static_cast<size_t>(kBwdDqSmem), ptr(qkv), ptr(out),
                   ptr(dy), ptr(dqkv), stats.get(), B, T, n_head, scale);
  kernels_->launch(dkv, grid, Dim3{256}, static_cast<size_t>(kBwdDkvSmem), ptr(qkv), ptr(dy),
                   ptr(dqkv), stats.get(), B, T, n_head, scale);
}

}  // namespace forge::cuda
