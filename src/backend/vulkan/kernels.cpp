// The Vulkan kernels of rows, indices, head layouts, attention and the fused matmuls:
// shapes -> push constants and grid -> recorded dispatches. Semantics: the CPU backend's
// (src/backend/cpu). The flat kernels are in flat_kernels.cpp, matmul in matmul.cpp.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "backend/vulkan/kernel_args.h"
#include "backend/vulkan/settings.h"
#include "backend/vulkan/vulkan_backend.h"
#include "forge/error.h"

namespace forge::vk {
namespace {

/// The flash-attention prefill kernel for head dimension hd and its queries per workgroup
/// (rows). hd <= 64: attention_prefill (16x16 invocations of 4x2 scores) or
/// attention_prefill_big (8x16 of 4x4 scores: twice the FMAs per invocation, its shared
/// reads in aligned runs of 4); both take 32 KiB of shared memory.
/// The setting attention_tile = small | big picks one; auto is small, which was the faster on
/// an H200 (docs/PERFORMANCE.md, "Measurements that shaped the kernels").
const char* prefill_kernel(int64_t hd, int64_t& rows) {
  const std::string& tile = settings().attention_tile;
  if (hd > 64) {
    rows = 32;
    return "attention_prefill_hd128";
  }
  rows = 64;
  return tile == "big" ? "attention_prefill_big" : "attention_prefill";
}

// The longest row (N1) for which a phase-2 invocation of gemv_chain holds all of its W2
// values in registers (at most 6 per invocation): gemv_chain_preload loads them before its
// wait.
constexpr int64_t kChainPreloadMaxRow = 768;

}  // namespace

ChainMode chain_mode(bool discrete) {
  switch (settings().chain) {
    case Settings::Chain::off: return ChainMode::off;
    case Settings::Chain::on: return ChainMode::on;
    case Settings::Chain::solo: return ChainMode::never_wait;
    default: return discrete ? ChainMode::on : ChainMode::off;
  }
}

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

void VulkanBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t C = table.dim(1), N = ids.numel(), V = table.dim(0);
  // Windows of the table's rows that fit one binding (GPT-2's 147 MiB wte on a 128 MiB
  // device: two); each writes the rows of out whose id falls in it.
  const int64_t rows = static_cast<int64_t>(ctx_->window_elements(u(C)) / u(C));
  for (int64_t r0 = 0; r0 < V; r0 += rows) {
    const int64_t n = std::min(rows, V - r0);
    run_1d("embedding", {in(ids), window(in(table), u(r0 * C), u(n * C)), out(o)},
           {u(N), u(C), u(n), u(r0)}, static_cast<uint64_t>(N * C));
  }
}

void VulkanBackend::scatter_add_rows(const Tensor& ids, const Tensor& src, Tensor& o) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const int64_t C = src.shape().cols(), V = o.shape().rows();
  // Windows of out's rows that fit one binding; each adds the rows whose id falls in it.
  const int64_t rows = static_cast<int64_t>(ctx_->window_elements(u(C)) / u(C));
  for (int64_t r0 = 0; r0 < V; r0 += rows) {
    const int64_t n = std::min(rows, V - r0);
    run_1d("scatter_add_rows", {in(ids), in(src), window(out(o), u(r0 * C), u(n * C))},
           {u(ids.numel()), u(C), u(r0), u(n)}, C);
  }
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
    if (const int64_t forced = settings().attention_splits) splits = std::min(forced, chunks);
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
         !c.attrs.spec1.trans_b && !spec2.trans_b && spec2.alpha == 1.0f &&
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
  // Short rows take the variant that loads its W2 values before its wait.
  ctx_->dispatch(N1 <= kChainPreloadMaxRow ? "gemv_chain_preload" : "gemv_chain",
                 {in(a), in(w1), in(b1), in(x), out(x_new), in(w2), b2.defined() ? in(b2) : in(a),
                  out(o), in(gamma), in(beta), whole(*work_, true)},
                 {u(N1), u(K1), u(N2), flags2, f(eps), static_cast<uint32_t>(groups1),
                  static_cast<uint32_t>(groups2)},
                 static_cast<uint32_t>(groups1 + groups2), 1, 1);
}

}  // namespace forge::vk
