// matmul on CUDA: the validated tensors as a cuBLASLt product (gemm.h), bias and GELU in its
// epilogue, accumulate as beta = 1; products of at most 8 rows (decode) as kernels/gemv.cu.
// Under precision bf16 the operands are rounded to bf16 copies first (forge_round_bf16); under
// tf32, with FORGE_CUDA_PAD_ROWS=1, large operands and results whose rows are not 16-byte
// aligned go through padded copies (pad_rows_on).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "backend/cuda/cuda_backend.h"

namespace forge::cuda {
namespace {

// a: [M, K] | [B, M, K] (trans_a: [K, M] | [B, K, M]); b: [K, N] | [B, K, N] (trans_b:
// [N, K] | [B, N, K]), of which only the first b_rows stored rows are used when b_rows > 0
// (the batch stride stays the stored matrix); out: [M, N] | [B, M, N]. Validated by
// ops/matmul.cpp.
GemmShape gemm_shape(const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulSpec& spec,
                     const Tensor& out, GemmShape::Precision precision) {
  GemmShape s;
  s.batch = out.rank() == 3 ? out.dim(0) : 1;
  s.m = out.dim(-2);
  s.n = out.dim(-1);
  s.k = spec.trans_a ? a.dim(-2) : a.dim(-1);
  s.trans_a = spec.trans_a;
  s.trans_b = spec.trans_b;
  s.stride_a = a.rank() == 3 ? a.dim(-2) * a.dim(-1) : 0;
  s.stride_b = b.rank() == 3 ? b.dim(-2) * b.dim(-1) : 0;
  s.stride_out = s.m * s.n;
  s.bias = bias.defined();
  s.gelu = spec.gelu;
  s.precision = precision;
  // A batch of row blocks times one shared b is one taller product: [B*M, K] x [K, N].
  if (s.batch > 1 && s.stride_b == 0 && !s.trans_a) {
    s.m *= s.batch;
    s.batch = 1;
    s.stride_a = s.stride_out = 0;
  }
  return s;
}

// fp32 rows of a length not a multiple of 4 floats (GPT-2's 50257-entry vocabulary: the
// logits, their gradient) are not 16-byte aligned, which keeps cuBLASLt's TF32 products off
// their fast tensor-core kernels (exact fp32 products are not affected: docs/PERFORMANCE.md,
// session 35). Under tf32 with FORGE_CUDA_PAD_ROWS=1 (opt-in until a
// training step with it has been measured on a GPU), an operand of at least kPadMinElements
// such elements is copied to rows padded to 4 floats first, and such an out is computed into
// padded rows and copied back.
constexpr int64_t kPadMinElements = int64_t{1} << 20;
bool pad_rows_on() {
  const char* v = std::getenv("FORGE_CUDA_PAD_ROWS");
  return v && std::strcmp(v, "1") == 0;
}
bool wants_padding(int64_t rows, int64_t cols) {
  return cols % 4 != 0 && rows * cols >= kPadMinElements;
}
int64_t padded(int64_t cols) { return (cols + 3) / 4 * 4; }

}  // namespace

bool gemv_fits(const GemmShape& s, CUdeviceptr b) {
  if (s.batch != 1 || s.trans_a || s.m > kGemvMaxRows || (b & 15) != 0) return false;
  return s.trans_b ? s.k % 4 == 0 : s.n % 4 == 0;
}

bool gemv_stages_rows(int64_t m, int64_t k) {
  return m * k * static_cast<int64_t>(sizeof(float)) <= kGemvStageBytes;
}

GemmShape CudaBackend::matmul_shape(const Tensor& a, const Tensor& b, const Tensor& bias,
                                    const MatmulSpec& spec, const Tensor& out) const {
  return gemm_shape(a, b, bias, spec, out, precision_);
}

void CudaBackend::gemv(const GemmShape& s, const Gemv& g) {
  const int gelu = s.gelu ? 1 : 0, acc = g.accumulate ? 1 : 0;
  const auto blocks = static_cast<unsigned>((s.n + 7) / 8);  // 8 columns a block, both kernels
  if (s.trans_b) {
    kernels_->launch("forge_gemv_nt", Dim3{blocks}, Dim3{256}, 0, g.x, g.w, g.bias, g.out, s.m, s.k,
                     s.n, g.alpha, gelu, acc);
    return;
  }
  // The rows of x (or their layernorm) go to shared memory when they fit; the same memory
  // then holds the partial sums (32 KiB). Launched early only into a captured step (a decode
  // step's graph, where the weights it reads before its wait are constant).
  const bool staged = gemv_stages_rows(s.m, s.k);
  const size_t smem = std::max<size_t>(32 << 10, staged ? s.m * s.k * sizeof(float) : 0);
  kernels_->launch_early_if(capturing_, "forge_gemv_nn", Dim3{blocks}, Dim3{256}, smem, g.x, g.w,
                            g.bias, g.out, s.m, s.k, s.n, g.alpha, gelu, acc, g.res, g.gamma,
                            g.beta, g.eps, staged ? 1 : 0);
}

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias,
                         const MatmulSpec& spec, bool accumulate, Tensor& out) {
  GemmShape s = gemm_shape(a, b, bias, spec, out, precision_);
  const CUdeviceptr bias_ptr = bias.defined() ? ptr(bias) : 0;
  if (s.k == 0) {
    empty_product(bias, spec.gelu, accumulate, out);
    return;
  }
  gemm_launches_.fetch_add(1, std::memory_order_relaxed);
  if (gemv_fits(s, ptr(b))) {
    Gemv g;
    g.x = ptr(a);
    g.w = ptr(b);
    g.bias = bias_ptr;
    g.out = ptr(out);
    g.alpha = spec.alpha;
    g.accumulate = accumulate;
    gemv(s, g);
    return;
  }
  CUdeviceptr pa = ptr(a), pb = ptr(b);
  std::optional<Scratch> a16, b16;
  if (s.precision == GemmShape::Precision::bf16) {
    // Both operands rounded to bf16 copies for this product (the tensors stay fp32).
    s.ld_a = round_bf16(a, a16);
    s.ld_b = round_bf16(b, b16);
    if (s.stride_a) s.stride_a = a.dim(-2) * s.ld_a;
    if (s.stride_b) s.stride_b = b.dim(-2) * s.ld_b;
    pa = a16->get();
    pb = b16->get();
  }
  std::optional<Scratch> a_pad, b_pad, out_pad;
  if (s.precision == GemmShape::Precision::tf32 && s.batch == 1 && pad_rows_on()) {
    // Stored rows and columns of each operand (packed rows; b's first rows only with b_rows).
    const int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
    const int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
    // An operand at p of rows x cols floats into padded rows of a new scratch: p and its
    // row stride `ld` then name the copy.
    auto pad = [&](CUdeviceptr& p, int64_t& ld, int64_t rows, int64_t cols,
                   std::optional<Scratch>& to) {
      if (!wants_padding(rows, cols)) return;
      ld = padded(cols);
      to.emplace(*this, static_cast<size_t>(rows * ld) * sizeof(float));
      copy_rows(p, cols, to->get(), ld, rows, cols);
      p = to->get();
    };
    pad(pa, s.ld_a, a_rows, a_cols, a_pad);
    pad(pb, s.ld_b, b_rows, b_cols, b_pad);
    if (wants_padding(s.m, s.n) && !(accumulate && spec.gelu)) {
      s.ld_out = padded(s.n);
      out_pad.emplace(*this, static_cast<size_t>(s.m * s.ld_out) * sizeof(float));
      if (accumulate) copy_rows(ptr(out), s.n, out_pad->get(), s.ld_out, s.m, s.n);
      gemm_->run(s, pa, pb, bias_ptr, out_pad->get(), spec.alpha, accumulate ? 1.0f : 0.0f);
      copy_rows(out_pad->get(), s.ld_out, ptr(out), s.n, s.m, s.n);
      return;
    }
  }
  if (accumulate && spec.gelu) {
    // out += gelu(...): the epilogue would apply GELU to the sum, so the product goes to a
    // scratch buffer first.
    const int64_t n = out.numel();
    Scratch tmp(*this, static_cast<size_t>(n) * sizeof(float));
    gemm_->run(s, pa, pb, bias_ptr, tmp.get(), spec.alpha, 0.0f);
    const CUdeviceptr o = ptr(out);
    kernels_->launch("forge_add", grid_for(n), Dim3{256}, 0, o, tmp.get(), o, n, n);
    return;
  }
  gemm_->run(s, pa, pb, bias_ptr, ptr(out), spec.alpha, accumulate ? 1.0f : 0.0f);
}

// Rows padded to a multiple of 8 elements (16 bytes: the vocabulary's 50257 columns would
// leave bf16 rows 2-byte aligned, off cuBLASLt's tensor-core kernels); files and tensors keep
// their shapes, only the copy is padded.
int64_t CudaBackend::round_bf16(const Tensor& x, std::optional<Scratch>& to) {
  const int64_t cols = x.dim(-1), rows = cols ? x.numel() / cols : 0;
  const int64_t ld = std::max<int64_t>(8, (cols + 7) / 8 * 8);
  to.emplace(*this, static_cast<size_t>(std::max<int64_t>(rows * ld, 8)) * 2);
  if (rows == 0) return ld;
  const CUdeviceptr from = ptr(x);
  const int64_t n = rows * cols;
  if (ld == cols && (from & 15) == 0)  // packed rows (ld == cols is a multiple of 8)
    kernels_->launch("forge_round_bf16", grid_for(n / 4), Dim3{256}, 0, from, to->get(), n);
  else
    kernels_->launch("forge_round_bf16_rows",
                     Dim3{static_cast<unsigned>(std::min<int64_t>(rows, 65536))}, Dim3{256}, 0,
                     from, to->get(), rows, cols, ld);
  return ld;
}

// rows x cols floats from rows of stride from_ld to rows of stride to_ld.
void CudaBackend::copy_rows(CUdeviceptr from, int64_t from_ld, CUdeviceptr to, int64_t to_ld,
                            int64_t rows, int64_t cols) {
  kernels_->launch("forge_copy_rows", Dim3{static_cast<unsigned>(std::min<int64_t>(rows, 65536))},
                   Dim3{256}, 0, from, from_ld, to, to_ld, rows, cols);
}

// K = 0: every product is 0, so out = [gelu](bias or 0), added to out with accumulate.
void CudaBackend::empty_product(const Tensor& bias, bool gelu, bool accumulate, Tensor& out) {
  const int64_t n = out.numel();
  const auto bytes = static_cast<size_t>(n) * sizeof(float);
  Scratch tmp(*this, bytes);
  ctx_->make_current();
  check(driver().memset_d8_async(tmp.get(), 0, bytes, ctx_->stream()), "cuMemsetD8Async");
  transfers_.fetch_add(1, std::memory_order_relaxed);
  if (bias.defined())
    kernels_->launch("forge_add", grid_for(n), Dim3{256}, 0, tmp.get(), ptr(bias), tmp.get(), n,
                     bias.numel());
  if (gelu) kernels_->launch("forge_gelu", grid_for(n), Dim3{256}, 0, tmp.get(), tmp.get(), n);
  const CUdeviceptr o = ptr(out);
  if (accumulate)
    kernels_->launch("forge_add", grid_for(n), Dim3{256}, 0, o, tmp.get(), o, n, n);
  else
    check(driver().memcpy_dtod_async(o, tmp.get(), bytes, ctx_->stream()), "cuMemcpyDtoDAsync_v2");
}

}  // namespace forge::cuda
