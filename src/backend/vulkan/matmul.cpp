// matmul on Vulkan: the tile kernels and their choice, gemm (one product: GEMV or tiles,
// split k, grids beyond the device's limits), and matmul's windows for operands larger
// than one binding.
#include <algorithm>
#include <string>
#include <string_view>

#include "backend/vulkan/kernel_args.h"
#include "backend/vulkan/settings.h"
#include "backend/vulkan/vulkan_backend.h"
#include "forge/error.h"

namespace forge::vk {
namespace {

// A tile kernel of the matmul: its shader, output tile (rows x cols per workgroup), and the
// workgroups below which gemm splits k (128x128: about 2 x 132 SMs of an H200; the half
// tiles: 384, swept there; 4 x 132 for matmul's lighter ones).
struct MatmulTile {
  const char* name;  // as the setting matmul_tile spells it
  const char* shader;
  uint32_t rows, cols;
  uint64_t fill_groups;
};
constexpr MatmulTile kTile128x128{"128x128", "matmul_big", 128, 128, 264};
constexpr MatmulTile kTile64x128{"64x128", "matmul_big_64x128", 64, 128, 384};
constexpr MatmulTile kTile128x64{"128x64", "matmul_big_128x64", 128, 64, 384};
constexpr MatmulTile kTile64x64{"64x64", "matmul", 64, 64, 528};

// The setting matmul_tile: auto lets matmul_tile choose; a tile name forces that tile on
// every product the big kernels take (M, N >= 128, K >= 64).
const MatmulTile* forced_tile() {
  const std::string& v = settings().matmul_tile;
  for (const MatmulTile* t : {&kTile128x128, &kTile64x128, &kTile128x64, &kTile64x64})
    if (v == t->name) return t;
  return nullptr;
}

// The tile kernel of an [M, N] output (M >= 2) per batch over K. 64x64 tiles (matmul) for
// small or skinny outputs (attention's [T, T] @ [T, 64]) or a short k; else the big kernels:
//  - 128x128 (matmul_big) when its grid reaches fill_groups workgroups: the most FMAs per
//    shared-memory read (on an H200 it beat matmul even on a small grid);
//  - else a half tile, 64x128 or 128x64, whichever pads the output less (64x128 on a tie):
//    twice the workgroups (GPT-2 prefill of 1024 tokens: 96-384 instead of 48-192) before
//    gemm splits k for what is still too few.
// The choices follow src/backend/vulkan/tools/sweep.sh on an H200 (docs/PERFORMANCE.md,
// "Measurements that shaped the kernels").
const MatmulTile& matmul_tile(uint64_t M, uint64_t N, uint64_t K, uint64_t batch) {
  const MatmulTile* forced = forced_tile();
  if (M < 128 || N < 128 || K < 64) return kTile64x64;
  if (forced) return *forced;
  auto groups = [&](const MatmulTile& t) {
    return (M + t.rows - 1) / t.rows * ((N + t.cols - 1) / t.cols) * batch;
  };
  if (groups(kTile128x128) >= kTile128x128.fill_groups) return kTile128x128;
  // Equal tile areas: fewer workgroups = less padding.
  return groups(kTile128x64) < groups(kTile64x128) ? kTile128x64 : kTile64x128;
}

}  // namespace

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
  // The setting split_k = N (1: never) overrides the count wherever a split is possible.
  const uint64_t tiles = tiles_n * tiles_m * batch;
  const bool contiguous = batch == 1 || dims[8] == static_cast<uint64_t>(M) * dims[5];
  const bool tiles_can_split = !gemv && contiguous && tiles_n <= lim[0] && tiles_m <= lim[1];
  const bool gemv_can_split = gemv && !trans_b && tiles_n <= lim[0] && batch <= lim[2];
  const uint64_t max_splits = tiles_can_split  ? std::max<uint64_t>(1, lim[2] / batch)
                              : gemv_can_split ? lim[1]
                                               : 1;
  uint64_t splits = 1;
  if (const uint64_t forced = settings().split_k; forced > 0) {
    splits = std::min<uint64_t>({forced, max_splits, std::max<uint32_t>(K, 1)});
  } else if (tiles_can_split) {
    // The split count nearest fill_groups / tiles, >= 192 k each: on the H200, 96 tiles of
    // 64x128 were fastest in 4 splits, 288 and 384 tiles unsplit (docs/PERFORMANCE.md,
    // "Measurements that shaped the kernels").
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

namespace {

/// Elements a binding of `outer` rows of `inner` elements, `ld` apart, spans.
uint64_t span(uint64_t outer, uint64_t inner, uint64_t ld) {
  return outer == 0 || inner == 0 ? 0 : (outer - 1) * ld + inner;
}

}  // namespace

VulkanBackend::Window VulkanBackend::matmul_window(const MatmulSpec& spec, uint64_t M, uint64_t N,
                                                   uint64_t K, uint64_t lda, uint64_t ldb) const {
  // Halve a dimension of each binding that exceeds the window until all fit: the rows
  // (outer) while they span more than a row's elements, else the row (inner). Every step
  // shrinks a span, and spans of one element fit.
  const uint64_t limit = ctx_->window_elements(1);
  Window w{M, N, K};
  auto shrink = [limit](uint64_t& outer, uint64_t& inner, uint64_t ld) {
    if (span(outer, inner, ld) <= limit) return false;
    uint64_t& d = outer > 1 && (outer - 1) * ld >= inner ? outer : inner;
    d = (d + 1) / 2;
    return true;
  };
  for (bool again = true; again;) {
    again = shrink(w.m, w.n, N);
    if (spec.trans_a ? shrink(w.k, w.m, lda) : shrink(w.m, w.k, lda)) again = true;
    if (spec.trans_b ? shrink(w.n, w.k, ldb) : shrink(w.k, w.n, ldb)) again = true;
  }
  return w;
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
  const Window w = batch == 1 ? matmul_window(spec, u(M), u(N), u(K), u(a.dim(-1)), u(b.dim(-1)))
                              : Window{u(M), u(N), u(K)};
  if (w.m == static_cast<uint64_t>(M) && w.n == static_cast<uint64_t>(N) &&
      w.k == static_cast<uint64_t>(K)) {
    gemm(in(a), in(b), bias.defined() ? &bias_arg : nullptr, out(o),
         {u(M), u(N), u(K), u(a.dim(-1)), u(b.dim(-1)), u(N), u(stride_a), u(stride_b), u(M * N)},
         spec.trans_a, spec.trans_b, spec.alpha, epilogue, u(batch), u(M), u(N));
    return;
  }
  // A rank-2 product with an operand larger than one binding (the tied LM head over GPT-2's
  // wte on a 128 MiB device, and its backward): blocks of out, each summed over windows of
  // k, the first with the bias and the caller's accumulate, the others adding to it.
  if (w.k < static_cast<uint64_t>(K) && spec.gelu) {
    // GELU cannot be summed in windows of k: the product and bias into a scratch, then
    // the GELU, then into out (both windowed too).
    Tensor tmp = Tensor::empty(o.shape(), DType::F32, o.device());
    MatmulSpec plain = spec;
    plain.gelu = false;
    matmul(a, b, bias, plain, false, tmp);
    gelu(tmp, tmp);
    if (accumulate)
      add(o, tmp, o);
    else
      copy(*tmp.storage(), tmp.offset() * 4, *o.storage(), o.offset() * 4, o.nbytes());
    return;
  }
  const uint64_t lda = u(a.dim(-1)), ldb = u(b.dim(-1)), ldc = u(N);
  for (uint64_t m0 = 0; m0 < static_cast<uint64_t>(M); m0 += w.m)
    for (uint64_t n0 = 0; n0 < static_cast<uint64_t>(N); n0 += w.n)
      for (uint64_t k0 = 0; k0 < static_cast<uint64_t>(K); k0 += w.k) {
        const uint64_t mc = std::min<uint64_t>(w.m, M - m0), nc = std::min<uint64_t>(w.n, N - n0);
        const uint64_t kc = std::min<uint64_t>(w.k, K - k0);
        const Arg wa = spec.trans_a ? window(in(a), k0 * lda + m0, span(kc, mc, lda))
                                    : window(in(a), m0 * lda + k0, span(mc, kc, lda));
        const Arg wb = spec.trans_b ? window(in(b), n0 * ldb + k0, span(nc, kc, ldb))
                                    : window(in(b), k0 * ldb + n0, span(kc, nc, ldb));
        const Arg wo = window(out(o), m0 * ldc + n0, span(mc, nc, ldc));
        const bool first = k0 == 0;
        const Arg wbias = bias.defined() ? window(bias_arg, n0, nc) : Arg{};
        const uint32_t epi = first ? epilogue : epilogue | kEpilogueAdd;
        gemm(wa, wb, first && bias.defined() ? &wbias : nullptr, wo,
             {u(mc), u(nc), u(kc), u(lda), u(ldb), u(ldc), 0u, 0u, u(mc * nc)}, spec.trans_a,
             spec.trans_b, spec.alpha, epi, 1u, u(mc), u(nc));
      }
}

}  // namespace forge::vk
