// The Vulkan kernels for weights stored in f16, bf16, q8_0 and q4_0 (forge/dtype.h), as the
// CPU's (src/backend/cpu/weight_kernels.cpp) with the same answers:
//  - matmul with an f32 a [B?, M, K] (trans_a possible) and such a b [N, K] used
//    transposed, f32 out with matmul's epilogue. f16 / bf16 weights are widened to f32 and
//    multiplied in f32: gemv_w16 for up to kGemvRows rows of out (decode, bound by reading
//    the weights: 16-byte loads of 8 weights, coalesced along K), else matmul_w16's tiles.
//    q8_0 / q4_0: quantize_rows_q8 rounds op(a)'s rows to int8 blocks (forge/ops.h) into a
//    scratch, then gemv_q or matmul_q add (dw * d) * (exact integer dot) per block in f32.
//  - embedding rows gathered from such a table, widened to f32 (embedding_w).
//  - matmul_add_layernorm_matmul of one row with f16 / bf16 W1 and W2 in one dispatch
//    (gemv_chain_w16: 16-bit rows as gemv_w16 reads them, gemv_chain's hand-off), where the chain
//    setting allows chains (kernels.cpp); other calls get the op's composition.
// Weights larger than one binding go in windows of whole rows (of b: columns of out).
#include <algorithm>

#include "backend/vulkan/kernel_args.h"
#include "backend/vulkan/vulkan_backend.h"

namespace forge::vk {
namespace {

// Rows of out up to which the GEMV kernels run (one workgroup row each, reading the
// weights again per row: decode steps and small batches); tiles beyond.
constexpr int64_t kGemvRows = 4;
// Push-constant flags of weight_matmul.glsl (with kEpilogueGelu, kEpilogueAdd).
constexpr uint32_t kTransA = 1, kVariant = 2, kBias = 4;

// Rows [row0, row0 + rows) of a weight tensor of row_bytes each, bound from the 4-byte word
// holding their first byte (rows of 34-byte blocks or odd f16 rows start at any even byte;
// the shaders add `extra`).
struct WeightRows {
  Arg arg;
  uint32_t extra;
};
WeightRows weight_rows(const Tensor& w, uint64_t row0, uint64_t rows, uint64_t row_bytes) {
  const uint64_t start = w.byte_offset() + row0 * row_bytes;
  const uint64_t aligned = start / 4 * 4;
  const uint64_t extra = start - aligned;
  const uint64_t bytes = (extra + rows * row_bytes + 3) / 4 * 4;
  return {Arg{&storage_of(w), static_cast<size_t>(aligned), static_cast<size_t>(bytes), false},
          static_cast<uint32_t>(extra)};
}

// Rows of row_bytes per window: what one binding holds, less the word of `extra`.
uint64_t window_rows(const Context& ctx, uint64_t row_bytes) {
  const uint64_t limit = ctx.window_elements(1) * 4;
  return std::max<uint64_t>(1, (limit > 4 ? limit - 4 : 0) / row_bytes);
}

bool is_block(DType d) { return d == DType::Q8_0 || d == DType::Q4_0; }

}  // namespace

void VulkanBackend::register_weight_kernels() {
  const Kernel mm = [](Backend& b, const OpCall& c) {
    static_cast<VulkanBackend&>(b).weight_matmul(c);
  };
  const Kernel emb = [](Backend& b, const OpCall& c) {
    static_cast<VulkanBackend&>(b).weight_embedding(c);
  };
  for (DType d : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    // The block dtypes' activation rounding checks its quotients in float64.
    if (is_block(d) && !ctx_->float64()) continue;
    add_kernel(Op::matmul, dtype_key({DType::F32, d, DType::F32}), mm);
    add_kernel(Op::embedding, dtype_key({DType::U32, d}), emb);
  }
  for (DType d : {DType::F16, DType::BF16})
    add_kernel(
        Op::matmul_add_layernorm_matmul,
        dtype_key({DType::F32, DType::F32, d, DType::F32, DType::F32, DType::F32, d, DType::F32}),
        [](Backend& b, const OpCall& c) { static_cast<VulkanBackend&>(b).weight_chain(c); },
        [](const Backend& b, const OpCall& c) {
          return static_cast<const VulkanBackend&>(b).takes_weight_chain(c);
        });
}

namespace {

// gemv_chain_w16's longest row of a (its shared copy, kAMax).
constexpr int64_t kChainMaxK1 = 4096;

// gemv_chain_w16's workgroups: 16 columns (rows of W1, then of W2) each.
uint64_t chain_groups(int64_t n) { return static_cast<uint64_t>((n + 15) / 16); }

}  // namespace

bool VulkanBackend::takes_weight_chain(const OpCall& c) const {
  // One row, plain 2-D operands, W1 [N1, K1] and W2 [N2, N1] used transposed and whole,
  // b1 given, 16-byte aligned rows of 8-weight groups (its loads), N1 and K1 within its
  // shared rows (the layernorm's, a's).
  const Tensor &x = c.in(0), &a = c.in(1), &w1 = c.in(2), &b1 = c.in(3), &w2 = c.in(6);
  const MatmulSpec &s1 = c.attrs.spec1, &s2 = c.attrs.spec;
  if (chain_mode(ctx_->discrete()) == ChainMode::off || ctx_->max_bindings() < kGemvChainBindings)
    return false;
  if (x.rank() != 2 || x.dim(0) != 1 || a.rank() != 2 || w1.rank() != 2 || w2.rank() != 2 ||
      !b1.defined())
    return false;
  if (!s1.trans_b || s1.trans_a || s1.gelu || s1.alpha != 1.0f || s1.b_rows != 0 || !s2.trans_b ||
      s2.trans_a || s2.alpha != 1.0f || s2.b_rows != 0)
    return false;
  const int64_t N1 = x.dim(1), K1 = a.dim(1);
  const uint64_t groups = chain_groups(N1) + chain_groups(w2.dim(0));
  const uint64_t binding = ctx_->limits().maxStorageBufferRange;
  return N1 <= kLnGemvMaxK && N1 % 8 == 0 && K1 % 8 == 0 && K1 <= kChainMaxK1 &&
         w1.byte_offset() % 16 == 0 && w2.byte_offset() % 16 == 0 &&
         static_cast<uint64_t>(w1.nbytes()) <= binding &&
         static_cast<uint64_t>(w2.nbytes()) <= binding && groups < 65536 &&
         groups <= ctx_->limits().maxComputeWorkGroupCount[0];
}

void VulkanBackend::weight_chain(const OpCall& c) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const Tensor &x = c.in(0), &a = c.in(1), &w1 = c.in(2), &b1 = c.in(3), &gamma = c.in(4),
               &beta = c.in(5), &w2 = c.in(6), &b2 = c.in(7);
  Tensor &x_new = c.out(0), &o = c.out(1);
  const MatmulSpec& spec2 = c.attrs.spec;
  const int64_t N1 = x.dim(1), K1 = a.dim(1), N2 = o.dim(-1);
  const uint64_t groups1 = chain_groups(N1), groups2 = chain_groups(N2);
  const ChainMode mode = chain_mode(ctx_->discrete());
  // The weights bound whole (takes_weight_chain: 16-byte aligned, so no `extra` byte).
  const Arg w1_arg = weight_rows(w1, 0, N1, dtype_bytes(w1.dtype(), K1)).arg;
  const Arg w2_arg = weight_rows(w2, 0, N2, dtype_bytes(w2.dtype(), N1)).arg;
  // Without b2, binding 6 is a again (never read: flags2 has no bias).
  const uint32_t flags2 = (w1.dtype() == DType::BF16 ? kVariant : 0u) |
                          (b2.defined() ? kBias : 0u) | (spec2.gelu ? kEpilogueGelu : 0u) |
                          (mode == ChainMode::never_wait ? 32u : 0u);
  ctx_->dispatch("gemv_chain_w16",
                 {in(a), w1_arg, in(b1), in(x), out(x_new), w2_arg, b2.defined() ? in(b2) : in(a),
                  out(o), in(gamma), in(beta), whole(*work_, true)},
                 {u(N1), u(K1), u(N2), flags2, f(c.attrs.eps), static_cast<uint32_t>(groups1),
                  static_cast<uint32_t>(groups2)},
                 static_cast<uint32_t>(groups1 + groups2), 1, 1);
}

void VulkanBackend::weight_matmul(const OpCall& c) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const Tensor& a = c.in(0);
  const Tensor& b = c.in(1);
  const Tensor& bias = c.in(2);
  Tensor& o = c.out(0);
  const MatmulSpec& spec = c.attrs.spec;
  const DType d = b.dtype();
  const bool block = is_block(d);
  const int64_t batch = o.rank() == 3 ? o.dim(0) : 1;
  const int64_t M = o.dim(-2), N = o.dim(-1), K = b.dim(1);
  const int64_t rows = batch * M;  // of out, [B, M] flattened
  if (rows == 0 || N == 0) return;
  const int64_t lda = a.dim(-1);
  const int64_t stride_a = a.rank() == 3 ? a.dim(-2) * a.dim(-1) : 0;
  const uint32_t flags = (spec.trans_a ? kTransA : 0u) |
                         (d == DType::BF16 || d == DType::Q4_0 ? kVariant : 0u) |
                         (bias.defined() ? kBias : 0u) | (spec.gelu ? kEpilogueGelu : 0u) |
                         (c.attrs.accumulate ? kEpilogueAdd : 0u);
  // Block weights: op(a)'s rows rounded to int8 blocks first, [rows, K] int8s then
  // [rows, K / 32] f32 scales (quantize_rows_q8.comp), one invocation per block.
  std::shared_ptr<VkStorage> q;
  if (block) {
    const uint64_t blocks = static_cast<uint64_t>(rows * (K / 32));
    q = ctx_->scratch(static_cast<size_t>(rows * K + rows * (K / 32) * 4));
    run_1d("quantize_rows_q8", {in(a), whole(*q, true)},
           {u(M), u(K), u(lda), u(stride_a), spec.trans_a ? 1u : 0u, u(rows)}, blocks);
  }
  const Arg a_arg = block ? whole(*q, false) : in(a);
  const Arg bias_arg = bias.defined() ? in(bias) : a_arg;
  const bool gemv = rows <= kGemvRows;
  const char* shader = block ? (gemv ? "gemv_q" : "matmul_q") : gemv ? "gemv_w16" : "matmul_w16";
  const uint64_t row_bytes = dtype_bytes(d, K);
  const uint64_t per_window = window_rows(*ctx_, row_bytes);
  for (uint64_t n0 = 0; n0 < static_cast<uint64_t>(N); n0 += per_window) {
    const uint64_t nc = std::min<uint64_t>(per_window, N - n0);
    const WeightRows w = weight_rows(b, n0, nc, row_bytes);
    const std::vector<uint32_t> params = {u(M),  u(nc),   u(K),  u(lda),        u(stride_a), u(N),
                                          u(n0), w.extra, flags, f(spec.alpha), u(rows)};
    // GEMV: 8 rows of b per workgroup, a row of out per workgroup z; tiles: 64 x 64 of out.
    if (gemv)
      ctx_->dispatch(shader, {a_arg, w.arg, bias_arg, out(o)}, params, u((nc + 7) / 8), 1, u(rows));
    else
      ctx_->dispatch(shader, {a_arg, w.arg, bias_arg, out(o)}, params, u((nc + 63) / 64),
                     u((rows + 63) / 64), 1);
  }
}

void VulkanBackend::weight_embedding(const OpCall& c) {
  std::lock_guard<std::recursive_mutex> lock(ctx_->mutex());
  const Tensor& ids = c.in(0);
  const Tensor& table = c.in(1);
  Tensor& o = c.out(0);
  const int64_t C = table.dim(1), V = table.dim(0), N = ids.numel();
  const DType d = table.dtype();
  const uint32_t kind = d == DType::F16 ? 0u : d == DType::BF16 ? 1u : d == DType::Q8_0 ? 2u : 3u;
  const uint64_t row_bytes = dtype_bytes(d, C);
  // Windows of the table's rows that fit one binding; each writes the rows of out whose id
  // falls in it.
  const uint64_t per_window = window_rows(*ctx_, row_bytes);
  for (uint64_t r0 = 0; r0 < static_cast<uint64_t>(V); r0 += per_window) {
    const uint64_t n = std::min<uint64_t>(per_window, V - r0);
    const WeightRows w = weight_rows(table, r0, n, row_bytes);
    run_1d("embedding_w", {in(ids), w.arg, out(o)},
           {u(N), u(C), u(n), u(r0), u(row_bytes), w.extra, kind}, static_cast<uint64_t>(N * C));
  }
}

}  // namespace forge::vk
