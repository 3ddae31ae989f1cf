// The fused ops of a decode step on CUDA, where the few-row products (kernels/gemv.cu, and
// forge_gemv_w16x of kernels/weights.cu for f16/bf16 weights) can take them in:
// layernorm_matmul as one launch (the block normalizes the rows into shared memory, then
// multiplies), matmul_add_layernorm_matmul as two (the residual added in the first product's
// epilogue, no copy of x first; then the fused layernorm product). Other shapes, and q8_0 /
// q4_0 weights, decline: the ops layer runs the composition (src/ops/compose.cpp). Training's
// attention_bwd registers here too (its kernels: cuda_attention.cpp).
#include "backend/cuda/cuda_backend.h"

namespace forge::cuda {
namespace {

CudaBackend& cu(Backend& b) { return static_cast<CudaBackend&>(b); }

bool is16(DType d) { return d == DType::F16 || d == DType::BF16; }

// Whether a fused product fits its few-row kernel: f32 weights [in, out] in forge_gemv_nn
// (with a layernorm, the rows staged), 16-bit weights [out, in] in forge_gemv_w16x.
bool product_fits(const GemmShape& s, const Tensor& w, bool layernorm) {
  if (s.k <= 0 || w.rank() != 2) return false;
  if (is16(w.dtype())) return s.batch == 1 && gemv16_fits(s.m, s.k, address(w), s.trans_a);
  return gemv_fits(s, address(w)) && !s.trans_b && (!layernorm || gemv_stages_rows(s.m, s.k));
}

}  // namespace

void CudaBackend::register_fused_kernels() {
  using C = const OpCall&;
  constexpr DType f = DType::F32;
  for (DType w : {DType::F32, DType::F16, DType::BF16}) {
    add_kernel(
        Op::layernorm_matmul, dtype_key({f, f, f, w, f}),
        [](Backend& b, C c) { cu(b).layernorm_matmul(c); },
        [](const Backend& b, C c) {
          return static_cast<const CudaBackend&>(b).takes_layernorm_matmul(c);
        });
    add_kernel(
        Op::matmul_add_layernorm_matmul, dtype_key({f, f, w, f, f, f, w, f}),
        [](Backend& b, C c) { cu(b).matmul_add_layernorm_matmul(c); },
        [](const Backend& b, C c) {
          return static_cast<const CudaBackend&>(b).takes_matmul_add_layernorm_matmul(c);
        });
  }
  add_kernel(
      Op::attention_bwd, [](Backend& b, C c) { cu(b).attention_bwd(c); },
      [](const Backend& b, C c) {
        return static_cast<const CudaBackend&>(b).takes_attention_bwd(c);
      });
}

void CudaBackend::fused_product(const GemmShape& s, DType w, const Gemv& g) {
  gemm_launches_.fetch_add(1, std::memory_order_relaxed);
  if (is16(w))
    gemv16(s.m, s.k, s.n, s.gelu, w == DType::BF16, g);
  else
    gemv(s, g);
}

// inputs: x [M, K] | [B, T, K], gamma, beta [K], w [K, N], bias [N]?; out [M, N] | [B, T, N]
bool CudaBackend::takes_layernorm_matmul(const OpCall& c) const {
  const Tensor& w = c.in(3);
  return product_fits(matmul_shape(c.in(0), w, c.in(4), c.attrs.spec, c.out(0)), w, true);
}

void CudaBackend::layernorm_matmul(const OpCall& c) {
  const MatmulSpec& spec = c.attrs.spec;
  const GemmShape s = matmul_shape(c.in(0), c.in(3), c.in(4), spec, c.out(0));
  Gemv g;
  g.x = ptr(c.in(0));
  g.gamma = ptr(c.in(1));
  g.beta = ptr(c.in(2));
  g.eps = c.attrs.eps;
  g.w = ptr(c.in(3));
  g.bias = c.in(4).defined() ? ptr(c.in(4)) : 0;
  g.out = ptr(c.out(0));
  g.alpha = spec.alpha;
  fused_product(s, c.in(3).dtype(), g);
}

// inputs: x [M, C], a [M, K1], w1 [K1, C], b1 [C]?, gamma, beta [C], w2 [C, N2], b2 [N2]?;
// outputs: x_new [M, C], out [M, N2]. attrs.spec1 is the first product's, spec the second's.
bool CudaBackend::takes_matmul_add_layernorm_matmul(const OpCall& c) const {
  const Tensor &a = c.in(1), &w1 = c.in(2), &w2 = c.in(6);
  const GemmShape s1 = matmul_shape(a, w1, c.in(3), c.attrs.spec1, c.out(0));
  const GemmShape s2 = matmul_shape(c.out(0), w2, c.in(7), c.attrs.spec, c.out(1));
  return product_fits(s1, w1, false) && product_fits(s2, w2, true);
}

void CudaBackend::matmul_add_layernorm_matmul(const OpCall& c) {
  const MatmulSpec &spec1 = c.attrs.spec1, &spec2 = c.attrs.spec;
  Tensor& x_new = c.out(0);
  const GemmShape s1 = matmul_shape(c.in(1), c.in(2), c.in(3), spec1, x_new);
  Gemv g1;  // x_new = x + [gelu](a @ w1 + b1)
  g1.x = ptr(c.in(1));
  g1.w = ptr(c.in(2));
  g1.bias = c.in(3).defined() ? ptr(c.in(3)) : 0;
  g1.res = ptr(c.in(0));
  g1.out = ptr(x_new);
  g1.alpha = spec1.alpha;
  fused_product(s1, c.in(2).dtype(), g1);
  const GemmShape s2 = matmul_shape(x_new, c.in(6), c.in(7), spec2, c.out(1));
  Gemv g2;  // out = [gelu](layernorm(x_new) @ w2 + b2)
  g2.x = ptr(x_new);
  g2.gamma = ptr(c.in(4));
  g2.beta = ptr(c.in(5));
  g2.eps = c.attrs.eps;
  g2.w = ptr(c.in(6));
  g2.bias = c.in(7).defined() ? ptr(c.in(7)) : 0;
  g2.out = ptr(c.out(1));
  g2.alpha = spec2.alpha;
  fused_product(s2, c.in(6).dtype(), g2);
}

}  // namespace forge::cuda
