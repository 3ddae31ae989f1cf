// Every Backend kernel on Vulkan: shapes -> push constants and grid -> one recorded
// dispatch (two for sumsq and layernorm_bwd). Semantics: the CPU backend's (src/backend/cpu).
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backend/vulkan/vulkan_backend.h"
#include "forge/error.h"

namespace forge::vk {
namespace {

const VkStorage& storage_of(const Tensor& t) {
  const auto* s = dynamic_cast<const VkStorage*>(t.storage().get());
  if (!s) throw Error(ErrorKind::Device, "vulkan: " + t.str() + " is not a Vulkan tensor");
  return *s;
}

Arg in(const Tensor& t) { return {&storage_of(t), t.offset() * 4, t.nbytes(), false}; }
Arg out(const Tensor& t) { return {&storage_of(t), t.offset() * 4, t.nbytes(), true}; }
Arg whole(const VkStorage& s, bool write) { return {&s, 0, s.bytes(), write}; }

uint32_t u(int64_t v) {
  if (v < 0 || v > 0xFFFFFFFFll)
    throw Error(ErrorKind::Unsupported,
                "vulkan: size " + std::to_string(v) + " does not fit the kernels' 32-bit indices");
  return static_cast<uint32_t>(v);
}
uint32_t f(float v) { return std::bit_cast<uint32_t>(v); }

constexpr uint64_t kWidth = 256;  // invocations per workgroup of the 1-D and row shaders
// Epilogue flags of the matmul shaders (matmul_epilogue.glsl), beside 1 trans_a, 2 trans_b,
// 4 bias and 64 split k in their `flags` push constant.
constexpr uint32_t kEpilogueGelu = 8;
constexpr uint32_t kEpilogueAdd = 16;

// --- matmul tiles ---------------------------------------------------------------------------

// A tile kernel of the matmul: its shader, output tile (rows x cols per workgroup), and the
// workgroups below which gemm splits k (128x128: about 2 x 132 SMs of an H200; the half
// tiles: 384, swept there; 4 x 132 for matmul's lighter ones).
struct MatmulTile {
  const char* name;  // as FORGE_VULKAN_MATMUL_TILE spells it
  const char* shader;
  uint32_t rows, cols;
  uint64_t fill_groups;
};
constexpr MatmulTile kTile128x128{"128x128", "matmul_big", 128, 128, 264};
constexpr MatmulTile kTile64x128{"64x128", "matmul_big_64x128", 64, 128, 384};
constexpr MatmulTile kTile128x64{"128x64", "matmul_big_128x64", 128, 64, 384};
constexpr MatmulTile kTile64x64{"64x64", "matmul", 64, 64, 528};

// The environment variable `name` ("" when unset), read on every call so that a benchmark
// sweep or a test can change it between products.
std::string_view env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// FORGE_VULKAN_MATMUL_TILE: "auto" (or unset) lets matmul_tile choose; a tile name forces
// that tile on every product the big kernels take (M, N >= 128, K >= 64).
const MatmulTile* forced_tile() {
  const std::string_view v = env("FORGE_VULKAN_MATMUL_TILE");
  if (v.empty() || v == "auto") return nullptr;
  for (const MatmulTile* t : {&kTile128x128, &kTile64x128, &kTile128x64, &kTile64x64})
    if (v == t->name) return t;
  throw Error(ErrorKind::Format, "vulkan: FORGE_VULKAN_MATMUL_TILE=" + std::string(v) +
                                     ": expected auto, 128x128, 64x128, 128x64 or 64x64");
}

// FORGE_VULKAN_SPLIT_K: "auto" (or unset) -> 0, gemm's own choice; N >= 1 -> N splits of k
// wherever the shapes allow one (1: never split).
uint64_t forced_split_k() {
  const std::string_view v = env("FORGE_VULKAN_SPLIT_K");
  if (v.empty() || v == "auto") return 0;
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > 65535)
    throw Error(ErrorKind::Format, "vulkan: FORGE_VULKAN_SPLIT_K=" + std::string(v) +
                                       ": expected auto or a count of splits in 1..65535");
  return n;
}

// The tile kernel of an [M, N] output (M >= 2) per batch over K. 64x64 tiles (matmul) for
// small or skinny outputs (attention's [T, T] @ [T, 64]) or a short k; else the big kernels:
//  - 128x128 (matmul_big) when its grid reaches fill_groups workgroups: the most FMAs per
//    shared-memory read (32 TFLOP/s at 4096^3 on an H200; measured there, it beat matmul
//    even on a small grid: prefill's [1024, 768] @ [768, 768], 48 workgroups on 132 SMs
//    was faster than matmul's 192);
//  - else a half tile, 64x128 or 128x64, whichever pads the output less (64x128 on a tie):
//    twice the workgroups (GPT-2 prefill of 1024 tokens: 96-384 instead of 48-192) before
//    gemm splits k for what is still too few.
// Measured on an H200 (bench/vulkan_sweep.sh, GPT-2 prefill's products of 1024 rows): the
// half tile beat 128x128 at every split count on the 48-192-tile products; 64x128 beat
// 128x64 on all four.
const MatmulTile& matmul_tile(uint64_t M, uint64_t N, uint64_t K, uint64_t batch) {
  const MatmulTile* forced = forced_tile();  // read first: a bad value fails on any product
  if (M < 128 || N < 128 || K < 64) return kTile64x64;
  if (forced) return *forced;
  auto groups = [&](const MatmulTile& t) {
    return (M + t.rows - 1) / t.rows * ((N + t.cols - 1) / t.cols) * batch;
  };
  if (groups(kTile128x128) >= kTile128x128.fill_groups) return kTile128x128;
  // Equal tile areas: fewer workgroups = less padding.
  return groups(kTile128x64) < groups(kTile64x128) ? kTile128x64 : kTile64x128;
}

/// The flash-attention prefill kernel for head dimension hd and its queries per workgroup
/// (rows). hd <= 64: attention_prefill (16x16 invocations of 4x2 scores) or
/// attention_prefill_big (8x16 of 4x4 scores: twice the FMAs per invocation, its shared
/// reads in aligned runs of 4); both take 32 KiB of shared memory.
/// FORGE_VULKAN_ATTENTION_TILE = small | big picks one; auto (or unset) is small: on an H200
/// big took 2.1 ms of a 1024-token prefill where small took 2.0 (bench/vulkan_sweep.sh).
const char* prefill_kernel(int64_t hd, int64_t& rows) {
  const std::string_view v = env("FORGE_VULKAN_ATTENTION_TILE");
  const std::string_view tile = v.empty() ? "auto" : v;
  if (tile != "auto" && tile != "small" && tile != "big")
    throw Error(ErrorKind::Format, "vulkan: FORGE_VULKAN_ATTENTION_TILE=" + std::string(tile) +
                                       ": expected auto, small or big");
  if (hd > 64) {
    rows = 32;
    return "attention_prefill_hd128";
  }
  rows = 64;
  return tile == "big" ? "attention_prefill_big" : "attention_prefill";
}

// FORGE_VULKAN_ATTENTION_SPLITS: unset or "auto" -> 0, attend's own choice; N >= 1 -> N
// workgroups per query in attention_decode (for measuring the split on a GPU).
int64_t forced_attention_splits() {
  const std::string_view v = env("FORGE_VULKAN_ATTENTION_SPLITS");
  if (v.empty() || v == "auto") return 0;
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 1)
    throw Error(ErrorKind::Format, "vulkan: FORGE_VULKAN_ATTENTION_SPLITS=" + std::string(v) +
                                       ": expected auto or a count >= 1");
  return n;
}

// FORGE_VULKAN_CHAIN: unset or "auto" -> gemv_chain on discrete GPUs only (where it is
// faster: lavapipe's threads would poll); "1" -> on any device (CI runs it on lavapipe);
// "0" -> never (matmul_add_layernorm_matmul as a copy and two kernels); "solo" (tests) ->
// gemv_chain whose second-phase workgroups never wait, each computing the first phase itself.
enum class ChainMode { off, on, never_wait };
ChainMode chain_mode(bool discrete) {
  const std::string_view v = env("FORGE_VULKAN_CHAIN");
  if (v.empty() || v == "auto") return discrete ? ChainMode::on : ChainMode::off;
  if (v == "0") return ChainMode::off;
  if (v == "1") return ChainMode::on;
  if (v == "solo") return ChainMode::never_wait;
  throw Error(ErrorKind::Format,
              "vulkan: FORGE_VULKAN_CHAIN=" + std::string(v) + ": expected auto, 0, 1 or solo");
}

}  // namespace

void VulkanBackend::run_1d(const char* shader, const std::vector<Arg>& args,
                           const std::vector<uint32_t>& params, uint64_t n) {
  if (n == 0) return;
  uint32_t gx = 0, gy = 0;
  ctx_->groups_1d((n + kWidth - 1) / kWidth, gx, gy);
  ctx_->dispatch(shader, args, params, gx, gy);
}

void VulkanBackend::run_rows(const char* shader, const std::vector<Arg>& args,
                             const std::vector<uint32_t>& params, uint64_t rows) {
  if (rows == 0) return;
  uint32_t gx = 0, gy = 0;
  ctx_->groups_1d(rows, gx, gy);
  ctx_->dispatch(shader, args, params, gx, gy);
}

// --- elementwise --------------------------------------------------------------------------

void VulkanBackend::add(const Tensor& a, const Tensor& b, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  run_1d("add", {in(a), in(b), out(o)}, {u(a.numel()), u(b.numel())}, a.numel());
}

void VulkanBackend::scale(const Tensor& x, float s, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  run_1d("scale", {in(x), out(o)}, {u(x.numel()), f(s)}, x.numel());
}

void VulkanBackend::gelu(const Tensor& x, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  run_1d("gelu", {in(x), out(o)}, {u(x.numel())}, x.numel());
}

void VulkanBackend::gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  run_1d("gelu_bwd", {in(x), in(dy), out(dx)}, {u(x.numel())}, x.numel());
}

void VulkanBackend::dropout(const Tensor& x, uint64_t seed, uint32_t threshold, float s,
                            Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  run_1d("dropout", {in(x), out(o)},
         {u(x.numel()), static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), threshold,
          f(s)},
         x.numel());
}

void VulkanBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                          const AdamWStep& k) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  run_1d("adamw", {out(param), in(grad), out(m), out(v)},
         {u(param.numel()), f(k.decay), f(k.beta1), f(k.one_minus_beta1), f(k.beta2),
          f(k.one_minus_beta2), f(k.step_size), f(k.bc2_sqrt), f(k.eps)},
         param.numel());
}

void VulkanBackend::sumsq(const Tensor& x, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  // Pass 1: fixed chunks of 4096 elements, one workgroup each, into partials; pass 2: one
  // workgroup adds the partials. Both in a fixed order: deterministic.
  constexpr uint64_t kChunk = 4096;
  const uint64_t n = static_cast<uint64_t>(x.numel());
  const uint64_t groups = std::max<uint64_t>(1, (n + kChunk - 1) / kChunk);
  auto partial = ctx_->scratch(groups * sizeof(float));
  run_rows("sumsq_partial", {in(x), whole(*partial, true)}, {u(x.numel()), u(kChunk), 1}, groups);
  run_rows("sumsq_partial", {whole(*partial, false), out(o)}, {u(groups), u(groups), 0}, 1);
}

// --- rows -----------------------------------------------------------------------------------

void VulkanBackend::softmax(const Tensor& x, bool causal, int64_t offset, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t S = x.shape().cols(), R = x.shape().rows();
  const int64_t T = causal ? x.dim(-2) : 1;
  run_rows("softmax", {in(x), out(o)},
           {u(R), u(S), causal ? 1u : 0u, u(T), u(std::clamp<int64_t>(offset, 0, S))}, R);
}

void VulkanBackend::softmax_bwd(const Tensor& y, const Tensor& dy, Tensor& dx) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t S = y.shape().cols(), R = y.shape().rows();
  run_rows("softmax_bwd", {in(y), in(dy), out(dx)}, {u(R), u(S)}, R);
}

void VulkanBackend::layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                              Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t C = x.shape().cols(), R = x.shape().rows();
  run_rows("layernorm", {in(x), in(gamma), in(beta), out(o)}, {u(R), u(C), f(eps)}, R);
}

void VulkanBackend::layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps,
                                  Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t C = x.shape().cols(), R = x.shape().rows();
  // 1. (mean, rstd) per row and 2. dx, both a workgroup per row (one shader in two modes);
  // 3. dgamma and dbeta partial sums per block of rows, 4. the blocks' sums in order.
  const uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(R, 1));
  auto stats = ctx_->scratch(rows * 2 * sizeof(float));
  run_rows("layernorm_bwd_dx", {in(x), in(gamma), in(dy), whole(*stats, true)},
           {u(R), u(C), f(eps), 1u}, R);
  run_rows("layernorm_bwd_dx", {in(x), in(gamma), in(dy), out(dx)}, {u(R), u(C), f(eps), 0u}, R);
  const uint64_t block = block_rows(static_cast<uint64_t>(R));
  // At least one block: with no rows it writes the zeros dgamma and dbeta must hold.
  const uint64_t blocks = std::max<uint64_t>(1, (static_cast<uint64_t>(R) + block - 1) / block);
  auto part = ctx_->scratch(2 * blocks * static_cast<uint64_t>(C) * sizeof(float));
  ctx_->dispatch("layernorm_bwd_params", {in(x), in(dy), whole(*stats, false), whole(*part, true)},
                 {u(R), u(C), u(static_cast<int64_t>(block))}, u((C + 255) / 256),
                 static_cast<uint32_t>(blocks));
  const size_t half = blocks * static_cast<uint64_t>(C) * sizeof(float);
  column_sums({part.get(), 0, half, false}, out(dgamma), blocks, static_cast<uint64_t>(C));
  column_sums({part.get(), half, half, false}, out(dbeta), blocks, static_cast<uint64_t>(C));
}

void VulkanBackend::sum_rows(const Tensor& x, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t C = x.shape().cols(), R = x.shape().rows();
  column_sums(in(x), out(o), static_cast<uint64_t>(R), static_cast<uint64_t>(C));
}

void VulkanBackend::column_sums(const Arg& x, const Arg& o, uint64_t R, uint64_t C) {
  const uint32_t gx = u(static_cast<int64_t>((C + 255) / 256));
  const uint64_t block = block_rows(R);
  const uint64_t blocks = (R + block - 1) / block;
  if (blocks <= 1) {
    ctx_->dispatch("sum_rows", {x, o}, {u(R), u(C), u(R)}, gx, 1);
    return;
  }
  auto part = ctx_->scratch(blocks * C * sizeof(float));
  ctx_->dispatch("sum_rows", {x, whole(*part, true)}, {u(R), u(C), u(block)}, gx,
                 static_cast<uint32_t>(blocks));
  ctx_->dispatch("sum_rows", {whole(*part, false), o}, {u(blocks), u(C), u(blocks)}, gx, 1);
}

uint64_t VulkanBackend::block_rows(uint64_t R) const {
  // 64 rows per block (a training batch's 16384 rows: 256 blocks, x 3 column groups at
  // C = 768), more when the blocks would exceed the grid's y limit.
  const uint64_t max_blocks = ctx_->limits().maxComputeWorkGroupCount[1];
  return std::max<uint64_t>(64, (R + max_blocks - 1) / max_blocks);
}

// --- index-driven ---------------------------------------------------------------------------

void VulkanBackend::embedding(const Tensor& ids, const Tensor& table, int64_t row_begin,
                              Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t C = table.dim(1), N = ids.numel();
  run_1d("embedding", {in(ids), in(table), out(o)}, {u(N), u(C), u(table.dim(0)), u(row_begin)},
         static_cast<uint64_t>(N * C));
}

void VulkanBackend::scatter_add_rows(const Tensor& ids, const Tensor& src, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t C = src.shape().cols();
  run_1d("scatter_add_rows", {in(ids), in(src), out(o)}, {u(ids.numel()), u(C)}, C);
}

void VulkanBackend::argmax_rows(const Tensor& x, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t V = x.shape().cols(), R = x.shape().rows();
  u(x.numel());
  // Spans of 2048 columns (one pass of the kernel's 256 x 8 loads) per workgroup, merged by
  // the row's last workgroup (GPT-2's 50257 logits: 25 workgroups); a whole row per
  // workgroup when the rows' counters or candidates would not fit the work buffer.
  constexpr int64_t kSpan = 2048;
  int64_t groups = (V + kSpan - 1) / kSpan;
  const int64_t room = static_cast<int64_t>(work_->bytes() / 4) - kWorkCounters;
  if (R > kRowCounters || 2 * R * groups > room) groups = 1;
  const int64_t span = groups == 1 ? V : kSpan;
  uint32_t gx = 0, gy = 0;
  ctx_->groups_1d(static_cast<uint64_t>(R * groups), gx, gy);
  ctx_->dispatch("argmax_rows", {in(x), out(o), whole(*work_, true)},
                 {u(R), u(V), u(groups), u(span)}, gx, gy);
}

void VulkanBackend::gather_nll(const Tensor& logits, const Tensor& targets, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t V = logits.shape().cols(), R = logits.shape().rows();
  run_rows("cross_entropy", {in(logits), in(targets), out(o)}, {u(R), u(V), 0u, f(0.0f)}, R);
}

void VulkanBackend::ce_bwd(const Tensor& logits, const Tensor& targets, float s, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t V = logits.shape().cols(), R = logits.shape().rows();
  run_rows("cross_entropy", {in(logits), in(targets), out(o)}, {u(R), u(V), 1u, f(s)}, R);
}

// --- head layouts ---------------------------------------------------------------------------

void VulkanBackend::split_heads(const Tensor& qkv, int64_t n_head, int part, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t T = o.dim(1), hd = o.dim(2), C = n_head * hd;
  run_1d("heads", {in(qkv), out(o)}, {u(o.numel()), u(T), u(hd), u(n_head), u(3 * C), u(part * C)},
         o.numel());
}

void VulkanBackend::unmerge_heads(const Tensor& x, int64_t n_head, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t T = o.dim(1), hd = o.dim(2), C = n_head * hd;
  run_1d("heads", {in(x), out(o)}, {u(o.numel()), u(T), u(hd), u(n_head), u(C), 0u}, o.numel());
}

void VulkanBackend::merge_heads(const Tensor& x, int64_t n_head, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t T = x.dim(1), hd = x.dim(2);
  run_1d("merge_heads", {in(x), in(x), in(x), out(o)}, {u(o.numel()), u(T), u(hd), u(n_head), 1u},
         o.numel());
}

void VulkanBackend::unsplit_head(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 int64_t n_head, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t T = dq.dim(1), hd = dq.dim(2);
  run_1d("merge_heads", {in(dq), in(dk), in(dv), out(o)},
         {u(o.numel()), u(T), u(hd), u(n_head), 3u}, o.numel());
}

// --- attention ------------------------------------------------------------------------------

void VulkanBackend::attention(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                              int64_t pos, Tensor& o) {
  attend(qkv, n_head, k_cache, v_cache, pos, nullptr, o);
}

void VulkanBackend::attention_at(const Tensor& qkv, int64_t n_head, Tensor& k_cache,
                                 Tensor& v_cache, const Tensor& pos, Tensor& o) {
  // Registered only where a shader may bind kAttnDecodeBindings buffers (why_unsupported).
  attend(qkv, n_head, k_cache, v_cache, 0, &pos, o);
}

void VulkanBackend::attend(const Tensor& qkv, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                           int64_t pos, const Tensor* pos_at, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t B = o.dim(0), T = o.dim(1), C = o.dim(2), hd = C / n_head, G = B * n_head;
  if (hd > 128)
    throw Error(ErrorKind::Unsupported, "vulkan: attention: head dimension " + std::to_string(hd) +
                                            " > 128 is not supported");
  const bool cached = k_cache.defined();
  const int64_t cap = cached ? k_cache.dim(1) : 0;
  // Every index the shaders form stays below the element counts checked here (32-bit).
  u(qkv.numel());
  u(o.numel());
  if (cached) u(k_cache.numel());
  // Without caches the cache bindings are qkv again (read-only here; the shaders never
  // touch them when cached = 0).
  const Arg kc = cached ? out(k_cache) : in(qkv);
  const Arg vc = cached ? out(v_cache) : in(qkv);
  const uint32_t scale = f(1.0f / std::sqrt(static_cast<float>(hd)));
  uint32_t gx = 0, gy = 0;

  // A decode step (T small; always for attention_at): the queries' keys split over
  // workgroups, the last of a query's workgroups combining their partials. The split count
  // depends on the shapes and the cache's capacity only, not on pos, so attention_at (pos
  // read on the device) gives attention's results bit for bit. About kAttnGroups
  // workgroups in all, each with at least one chunk of 32 keys of the capacity.
  constexpr int64_t kDecodeMaxT = 8;
  if (pos_at || (T <= kDecodeMaxT && ctx_->max_bindings() >= kAttnDecodeBindings)) {
    const int64_t queries = G * T, chunks = ((cached ? cap : T) + 31) / 32;
    int64_t splits = std::min(chunks, (kAttnGroups + queries - 1) / queries);
    if (const int64_t forced = forced_attention_splits()) splits = std::min(forced, chunks);
    // The work buffer: kWorkCounters counters, then the partials (2 + hd floats each).
    const int64_t room = static_cast<int64_t>(work_->bytes() / 4) - kWorkCounters;
    if (queries > kRowCounters) splits = 1;
    splits = std::max<int64_t>(1, std::min(splits, room / (queries * (hd + 2))));
    const std::vector<uint32_t> params = {
        u(T),  u(n_head), u(hd), u(cap), u(pos), (cached ? 1u : 0u) | (pos_at ? 2u : 0u),
        scale, u(splits), u(G)};
    // Without a position tensor binding 5 is qkv again, never read.
    const std::vector<Arg> args = {
        in(qkv), kc, vc, out(o), whole(*work_, true), pos_at ? in(*pos_at) : in(qkv)};
    ctx_->groups_1d(static_cast<uint64_t>(queries * splits), gx, gy);
    ctx_->dispatch("attention_decode", args, params, gx, gy);
    return;
  }
  // Prefill: the tiled flash kernel (a workgroup per tile of `rows` queries).
  int64_t rows = 0;
  const char* prefill = prefill_kernel(hd, rows);
  const int64_t tiles = (T + rows - 1) / rows;
  const std::vector<uint32_t> params = {u(T),  u(n_head), u(hd), u(cap), u(pos), cached ? 1u : 0u,
                                        scale, u(tiles),  u(G)};
  ctx_->groups_1d(static_cast<uint64_t>(G * tiles), gx, gy);
  ctx_->dispatch(prefill, {in(qkv), kc, vc, out(o)}, params, gx, gy);
}

// --- matmul ---------------------------------------------------------------------------------

void VulkanBackend::gemm(const Arg& a, const Arg& b, const Arg* bias, const Arg& o,
                         const std::vector<uint32_t>& dims, bool trans_a, bool trans_b, float alpha,
                         uint32_t epilogue, uint32_t batch, uint32_t M, uint32_t N,
                         const LnArgs* ln) {
  if (M == 0 || N == 0 || batch == 0) return;
  const uint32_t flags = (trans_a ? 1u : 0u) | (trans_b ? 2u : 0u) | (bias ? 4u : 0u) | epilogue;
  const auto& lim = ctx_->limits().maxComputeWorkGroupCount;
  // M = 1 (a decode step): a matrix-vector kernel, 8 output columns per workgroup. Otherwise
  // a tile kernel (matmul_tile). Both kernels fit the 16 KiB of shared memory every device
  // has.
  const uint32_t K = dims[2];
  const bool gemv = M == 1;
  const MatmulTile* tile = gemv ? nullptr : &matmul_tile(M, N, K, batch);
  const char* shader = tile ? tile->shader : trans_b ? "gemv_t" : ln ? "gemv_n_ln" : "gemv_n";
  // The kernel's bindings (+ gamma, beta with ln) and its push constants after the dims.
  auto bind = [&](const Arg& dst) {
    std::vector<Arg> args = {a, b, bias ? *bias : a, dst};
    if (ln) args.insert(args.end(), {ln->gamma, ln->beta});
    return args;
  };
  auto with_eps = [&](std::vector<uint32_t> params) {
    if (ln) params.push_back(f(ln->eps));
    return params;
  };
  const uint64_t cols_per_group = tile ? tile->cols : 8;
  const uint64_t rows_per_group = tile ? tile->rows : 64;
  const uint64_t tiles_n = (N + cols_per_group - 1) / cols_per_group;
  const uint64_t tiles_m = (M + rows_per_group - 1) / rows_per_group;
  // Split k over workgroups when the output tiles alone are too few to fill a GPU, writing
  // raw partial sums that split_k_reduce adds in order (deterministic) with the epilogue.
  //  - Tiles (prefill's [1024, 768] @ [768, 768]: 96 tiles of 64x128; attention's [12, 1024,
  //    1024] @ [12, 1024, 64]: 192 tiles of 64^2): splits of >= 192 k along z (batch *
  //    splits + split; a batched output must be contiguous, stride_c = M ldc) up to the
  //    tile's fill_groups.
  //  - gemv_n: its 8-column workgroups walk all of k, so decode's products (N >= 768: 96+
  //    workgroups) are one dispatch. Only a few columns over a long k (fewer than 16
  //    workgroups, k >= 2048) still split, >= 1024 k per split along y: there one workgroup
  //    would walk k alone for longer than the second dispatch costs. A guess, not measured.
  //  - gemv_t (the LM head, q k^T) never splits: 8 columns per workgroup, N rows of b.
  // FORGE_VULKAN_SPLIT_K=N (1: never) overrides the count wherever a split is possible.
  const uint64_t tiles = tiles_n * tiles_m * batch;
  const bool contiguous = batch == 1 || dims[8] == static_cast<uint64_t>(M) * dims[5];
  const bool tiles_can_split = !gemv && contiguous && tiles_n <= lim[0] && tiles_m <= lim[1];
  const bool gemv_can_split = gemv && !trans_b && tiles_n <= lim[0] && batch <= lim[2];
  const uint64_t max_splits = tiles_can_split  ? std::max<uint64_t>(1, lim[2] / batch)
                              : gemv_can_split ? lim[1]
                                               : 1;
  uint64_t splits = 1;
  if (const uint64_t forced = forced_split_k(); forced > 0) {
    splits = std::min<uint64_t>({forced, max_splits, std::max<uint32_t>(K, 1)});
  } else if (tiles_can_split) {
    // The split count nearest fill_groups / tiles, >= 192 k each. H200, 64x128 tiles: 96
    // tiles (N = 768, K = 768 or 3072) were fastest in 4 splits (0.072 / 0.19 ms, against
    // 0.078 / 0.24 in 3), 288 and 384 tiles unsplit.
    const uint64_t want = (tile->fill_groups + tiles / 2) / tiles;
    splits = std::clamp<uint64_t>(std::min<uint64_t>(want, K / 192), 1, max_splits);
  } else if (gemv_can_split && tiles < 16 && K >= 2048) {
    splits =
        std::clamp<uint64_t>(std::min<uint64_t>((64 + tiles - 1) / tiles, K / 1024), 1, max_splits);
  }
  if (splits > 1) {
    const uint32_t k_split = static_cast<uint32_t>((K + splits - 1) / splits);
    const uint64_t s = (K + k_split - 1) / k_split;          // splits actually used
    const uint64_t rows = static_cast<uint64_t>(batch) * M;  // rows of the output
    auto part = ctx_->scratch(rows * s * N * sizeof(float));
    std::vector<uint32_t> params = dims;
    params.insert(params.end(), {flags | 64u, f(alpha), 0u, 0u, 0u, k_split});
    ctx_->dispatch(shader, bind(whole(*part, true)), with_eps(params),
                   static_cast<uint32_t>(tiles_n), static_cast<uint32_t>(gemv ? s : tiles_m),
                   static_cast<uint32_t>(gemv ? batch : batch * s));
    // GEMV rows are batches (stride_c apart), a matmul's rows (batch * M + m) ldc apart.
    run_1d("split_k_reduce", {whole(*part, false), bias ? *bias : a, o},
           {u(static_cast<int64_t>(rows * N)), N, static_cast<uint32_t>(s),
            gemv ? dims[8] : dims[5], (bias ? 4u : 0u) | epilogue, f(alpha)},
           rows * N);
    return;
  }
  // Grids beyond maxComputeWorkGroupCount go as several dispatches with base tiles.
  for (uint64_t z0 = 0; z0 < batch; z0 += lim[2])
    for (uint64_t y0 = 0; y0 < tiles_m; y0 += lim[1])
      for (uint64_t x0 = 0; x0 < tiles_n; x0 += lim[0]) {
        std::vector<uint32_t> params = dims;
        params.push_back(flags);
        params.push_back(f(alpha));
        params.push_back(static_cast<uint32_t>(x0));
        params.push_back(static_cast<uint32_t>(y0));
        params.push_back(static_cast<uint32_t>(z0));
        params.push_back(0u);  // k_split: unused without flag 64 (whole k)
        ctx_->dispatch(shader, bind(o), with_eps(params),
                       static_cast<uint32_t>(std::min<uint64_t>(lim[0], tiles_n - x0)),
                       static_cast<uint32_t>(std::min<uint64_t>(lim[1], tiles_m - y0)),
                       static_cast<uint32_t>(std::min<uint64_t>(lim[2], batch - z0)));
      }
}

void VulkanBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias,
                           const MatmulSpec& spec, bool accumulate, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t batch = o.rank() == 3 ? o.dim(0) : 1;
  const int64_t M = o.dim(-2), N = o.dim(-1);
  const int64_t K = spec.trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t stride_a = a.rank() == 3 ? a.dim(-2) * a.dim(-1) : 0;
  // The batch stride of b is the full stored matrix even when b_rows cuts it.
  const int64_t stride_b = b.rank() == 3 ? b.dim(-2) * b.dim(-1) : 0;
  const Arg bias_arg = bias.defined() ? in(bias) : Arg{};
  // o is bound read-write: with accumulate the epilogue reads it before writing.
  const uint32_t epilogue = (spec.gelu ? kEpilogueGelu : 0u) | (accumulate ? kEpilogueAdd : 0u);
  gemm(in(a), in(b), bias.defined() ? &bias_arg : nullptr, out(o),
       {u(M), u(N), u(K), u(a.dim(-1)), u(b.dim(-1)), u(N), u(stride_a), u(stride_b), u(M * N)},
       spec.trans_a, spec.trans_b, spec.alpha, epilogue, u(batch), u(M), u(N));
}

void VulkanBackend::layernorm_matmul(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, const Tensor& w, const Tensor& bias,
                                     const MatmulSpec& spec, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t N = o.dim(-1), K = x.dim(-1);
  const int64_t batch = o.rank() == 3 ? o.dim(0) : 1;
  const int64_t stride_a = x.rank() == 3 ? K : 0;
  const int64_t stride_b = w.rank() == 3 ? w.dim(-2) * w.dim(-1) : 0;
  const Arg bias_arg = bias.defined() ? in(bias) : Arg{};
  const LnArgs ln{in(gamma), in(beta), eps};
  gemm(in(x), in(w), bias.defined() ? &bias_arg : nullptr, out(o),
       {1u, u(N), u(K), u(K), u(w.dim(-1)), u(N), u(stride_a), u(stride_b), u(N)}, false, false,
       spec.alpha, spec.gelu ? kEpilogueGelu : 0u, u(batch), 1u, u(N), &ln);
}

namespace {

// gemv_chain's workgroups per phase: phase 1 in workgroups of 16 columns (as phase 2), or
// of 8 for long rows of W1 (K1 > 1024), whose loads want more workgroups (measured in
// docs/PERFORMANCE.md, "Vulkan on an NVIDIA H200").
struct ChainGrid {
  bool narrow;
  uint64_t groups1, groups2;
};
ChainGrid chain_grid(int64_t N1, int64_t K1, int64_t N2) {
  const bool narrow = K1 > 1024;
  return {narrow, static_cast<uint64_t>(narrow ? (N1 + 7) / 8 : (N1 + 15) / 16),
          static_cast<uint64_t>((N2 + 15) / 16)};
}

}  // namespace

bool VulkanBackend::takes_layernorm_matmul(const OpCall& c) const {
  // One row per product (a decode step) fits gemv_n_ln; other shapes: layernorm, then matmul
  // (ln_f folded into the LM head was slower: docs/PERFORMANCE.md, "Vulkan on an NVIDIA H200").
  return c.out(0).dim(-2) == 1 && !c.attrs.spec.trans_b && c.in(0).dim(-1) <= kLnGemvMaxK &&
         ctx_->max_bindings() >= 6;
}

bool VulkanBackend::takes_matmul_add_layernorm_matmul(const OpCall& c) const {
  // One dispatch where FORGE_VULKAN_CHAIN allows it and gemv_chain takes the shapes: one
  // row, plain 2-D operands, b1 given, vec4-aligned weights (its loads), a row short enough
  // for the layernorm's shared copy. Otherwise the copy and the two kernels.
  const Tensor &x = c.in(0), &a = c.in(1), &w1 = c.in(2), &b1 = c.in(3), &w2 = c.in(6);
  const MatmulSpec& spec2 = c.attrs.spec;
  const int64_t N1 = x.dim(-1), K1 = a.dim(-1), N2 = c.out(1).dim(-1);
  const ChainGrid g = chain_grid(N1, K1, N2);
  // (Its done count holds the dispatch's workgroups in 16 bits.)
  return chain_mode(ctx_->discrete()) != ChainMode::off && g.groups1 + g.groups2 < 65536 &&
         ctx_->max_bindings() >= kGemvChainBindings && x.rank() == 2 && x.dim(0) == 1 &&
         a.rank() == 2 && w1.rank() == 2 && w2.rank() == 2 && b1.defined() && !spec2.trans_a &&
         !spec2.trans_b && spec2.alpha == 1.0f &&
         (spec2.b_rows == 0 || spec2.b_rows == w2.dim(0)) && N1 <= kLnGemvMaxK && N1 % 4 == 0 &&
         N2 % 4 == 0 && w1.offset() % 4 == 0 && w2.offset() % 4 == 0 &&
         g.groups1 + g.groups2 <= ctx_->limits().maxComputeWorkGroupCount[0];
}

void VulkanBackend::matmul_add_layernorm_matmul(const Tensor& x, const Tensor& a, const Tensor& w1,
                                                const Tensor& b1, const Tensor& gamma,
                                                const Tensor& beta, float eps, const Tensor& w2,
                                                const Tensor& b2, const MatmulSpec& spec2,
                                                Tensor& x_new, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t N1 = x.dim(-1), K1 = a.dim(-1), N2 = o.dim(-1);
  const auto [narrow, groups1, groups2] = chain_grid(N1, K1, N2);
  const ChainMode mode = chain_mode(ctx_->discrete());
  // Without b2, binding 6 is a again (never read: flags2 has no bias).
  const uint32_t flags2 = (b2.defined() ? 4u : 0u) | (spec2.gelu ? kEpilogueGelu : 0u) |
                          (mode == ChainMode::never_wait ? 32u : 0u) | (narrow ? 64u : 0u);
  // Rows of at most 768 (GPT-2 124M) take the variant that loads W2 before its wait.
  ctx_->dispatch(N1 <= 768 ? "gemv_chain_768" : "gemv_chain",
                 {in(a), in(w1), in(b1), in(x), out(x_new), in(w2), b2.defined() ? in(b2) : in(a),
                  out(o), in(gamma), in(beta), whole(*work_, true)},
                 {u(N1), u(K1), u(N2), flags2, f(eps), static_cast<uint32_t>(groups1),
                  static_cast<uint32_t>(groups2)},
                 static_cast<uint32_t>(groups1 + groups2), 1, 1);
}

void VulkanBackend::matmul_transb_into(const Tensor& a, const Tensor& chunk, float alpha,
                                       int64_t col_begin, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t R = a.dim(0), K = a.dim(1), V = chunk.dim(0), ld = o.dim(-1);
  // Rows of out in slices whose binding fits maxStorageBufferRange (logits of many rows
  // over a 50257 vocabulary exceed 128 MiB from 667 rows on), a's rows with them.
  const int64_t row_bytes = ld * 4;
  const int64_t slice = std::max<int64_t>(
      1, static_cast<int64_t>(ctx_->limits().maxStorageBufferRange) / row_bytes - 1);
  for (int64_t r0 = 0; r0 < R; r0 += slice) {
    const int64_t rows = std::min(slice, R - r0);
    // Bind out from column col_begin of row r0 on: element (r, j) is at r * ld + j.
    Arg dst = out(o);
    dst.offset += static_cast<size_t>(r0 * ld + col_begin) * 4;
    dst.bytes = static_cast<size_t>((rows - 1) * ld + V) * 4;
    Arg src = in(a);
    src.offset += static_cast<size_t>(r0 * K) * 4;
    src.bytes = static_cast<size_t>(rows * K) * 4;
    gemm(src, in(chunk), nullptr, dst, {u(rows), u(V), u(K), u(K), u(K), u(ld), 0u, 0u, 0u}, false,
         true, alpha, 0u, 1, u(rows), u(V));
  }
}

}  // namespace forge::vk
