// The WebGPU backend's kernels: each op's shapes turned into a WGSL shader's parameters
// (shaders/<name>.wgsl states each one's layout), and its kernel table.
#include <algorithm>
#include <cmath>

#include "backend/webgpu/webgpu_backend.h"
#include "core/bit_cast.h"
#include "forge/error.h"

namespace forge::webgpu {
namespace {

using C = const OpCall&;
WebGpuBackend& wg(Backend& b) { return static_cast<WebGpuBackend&>(b); }

uint32_t u(int64_t v) { return static_cast<uint32_t>(v); }
uint32_t f(float v) { return forge::bit_cast<uint32_t>(v); }
uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
// The element index (f32 / u32) where a binding's tensor starts.
uint32_t e0(const Binding& b) { return b.first_byte / 4; }

int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

void add(Backend& be, C c) {
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor& out = c.out(0);
  auto& w = wg(be);
  const Binding ba = w.bind(a), bb = w.bind(b), bo = output(w.bind(out));
  w.dispatch_flat("add", {ba, bb, bo}, {u(a.numel()), u(b.numel()), e0(ba), e0(bb), e0(bo)},
                  ceil_div(a.numel(), 256));
}

void gelu(Backend& be, C c) {
  auto& w = wg(be);
  const Binding bx = w.bind(c.in(0)), bo = output(w.bind(c.out(0)));
  w.dispatch_flat("gelu", {bx, bo}, {u(c.in(0).numel()), e0(bx), e0(bo)},
                  ceil_div(c.in(0).numel(), 256));
}

void softmax(Backend& be, C c) {
  const Tensor& x = c.in(0);
  auto& w = wg(be);
  const int64_t S = x.dim(-1), rows = rows_of(x);
  const int64_t T = c.attrs.causal ? x.dim(-2) : 1;
  const Binding bx = w.bind(x), bo = output(w.bind(c.out(0)));
  w.dispatch_flat(
      "softmax", {bx, bo},
      {u(rows), u(S), u(T), c.attrs.causal ? 1u : 0u, u(c.attrs.offset), e0(bx), e0(bo)},
      static_cast<uint64_t>(rows));
}

void layernorm(Backend& be, C c) {
  const Tensor& x = c.in(0);
  auto& w = wg(be);
  const Binding bx = w.bind(x), bg = w.bind(c.in(1)), bb = w.bind(c.in(2)),
                bo = output(w.bind(c.out(0)));
  w.dispatch_flat("layernorm", {bx, bg, bb, bo},
                  {u(rows_of(x)), u(x.dim(-1)), f(c.attrs.eps), e0(bx), e0(bg), e0(bb), e0(bo)},
                  static_cast<uint64_t>(rows_of(x)));
}

void argmax_rows(Backend& be, C c) {
  const Tensor& x = c.in(0);
  auto& w = wg(be);
  const Binding bx = w.bind(x), bo = output(w.bind(c.out(0)));
  w.dispatch_flat("argmax_rows", {bx, bo}, {u(rows_of(x)), u(x.dim(-1)), e0(bx), e0(bo)},
                  static_cast<uint64_t>(rows_of(x)));
}

// Rows of a [rows, row_bytes] weight that one window takes: window_bytes() of them, at
// least one, and within one binding (which may start up to 255 bytes before the first row,
// at the offset alignment, and end up to 3 bytes after the last).
int64_t rows_per_binding(const WebGpuBackend& w, size_t row_bytes) {
  row_bytes = std::max<size_t>(row_bytes, 1);
  const size_t usable = w.max_binding() > 512 ? w.max_binding() - 512 : 0;
  if (row_bytes > usable)
    throw Error(ErrorKind::Unsupported, "webgpu: a row of " + std::to_string(row_bytes) +
                                            " bytes is over the device's storage binding limit (" +
                                            std::to_string(w.max_binding()) + " bytes)");
  const size_t window = std::min(usable, std::max(w.window_bytes(), row_bytes));
  return static_cast<int64_t>(window / row_bytes);
}

void embedding(Backend& be, C c) {
  const Tensor &ids = c.in(0), &table = c.in(1);
  Tensor& out = c.out(0);
  auto& w = wg(be);
  const int64_t V = table.dim(0), Cd = table.dim(1), n = ids.numel();
  const bool q8 = table.dtype() == DType::Q8_0;
  const size_t row_bytes = dtype_bytes(table.dtype(), Cd);
  const int64_t per = rows_per_binding(w, row_bytes);
  const Binding bi = w.bind(ids), bo = output(w.bind(out));
  for (int64_t r0 = 0; r0 < V; r0 += per) {
    const int64_t rows = std::min(per, V - r0);
    const Binding bt =
        w.bind(table, static_cast<size_t>(r0) * row_bytes, static_cast<size_t>(rows) * row_bytes);
    w.dispatch_flat(q8 ? "embedding_q8_0" : "embedding", {bi, bt, bo},
                    {u(n), u(Cd), u(r0), u(rows), e0(bi), q8 ? bt.first_byte : e0(bt), e0(bo)},
                    ceil_div(static_cast<uint64_t>(n * Cd), 256));
  }
}

void split_heads(Backend& be, C c) {
  const Tensor& qkv = c.in(0);
  Tensor& out = c.out(0);
  auto& w = wg(be);
  const int64_t T = qkv.dim(-2), Cd = qkv.dim(-1) / 3, nh = c.attrs.n_head;
  const Binding bx = w.bind(qkv), bo = output(w.bind(out));
  w.dispatch_flat("split_heads", {bx, bo},
                  {u(out.numel()), u(T), u(Cd), u(Cd / nh), u(nh), u(c.attrs.part), e0(bx), e0(bo)},
                  ceil_div(out.numel(), 256));
}

void merge_heads(Backend& be, C c) {
  const Tensor& x = c.in(0);
  Tensor& out = c.out(0);
  auto& w = wg(be);
  const int64_t T = x.dim(-2), hd = x.dim(-1), nh = c.attrs.n_head;
  const Binding bx = w.bind(x), bo = output(w.bind(out));
  w.dispatch_flat("merge_heads", {bx, bo},
                  {u(out.numel()), u(T), u(nh * hd), u(hd), u(nh), e0(bx), e0(bo)},
                  ceil_div(out.numel(), 256));
}

// attention and attention_at: the new keys and values into the caches (when given), then
// one workgroup per query. pos: a U32 [1] tensor on the device, or undefined (attrs.pos).
void attention_with(WebGpuBackend& w, const Tensor& qkv, int64_t nh, Tensor& kc, Tensor& vc,
                    int64_t pos, const Tensor* pos_t, Tensor& out) {
  const int64_t B = qkv.rank() == 3 ? qkv.dim(0) : 1, T = qkv.dim(-2), Cd = qkv.dim(-1) / 3;
  const int64_t hd = Cd / nh;
  if (hd > 256)
    throw Error(ErrorKind::Unsupported,
                "webgpu: attention takes head sizes up to 256, not " + std::to_string(hd));
  const bool cached = kc.defined();
  const int64_t cap = cached ? kc.dim(1) : T;
  const Binding bx = w.bind(qkv), bo = output(w.bind(out));
  const Binding bp = pos_t ? w.bind(*pos_t) : w.unused();
  const uint32_t use_buf = pos_t ? 1u : 0u;
  // The caches: written by kv_write, read by attention (unused inputs without them).
  const Binding bk = cached ? w.bind(kc) : w.unused(), bv = cached ? w.bind(vc) : w.unused();
  if (cached) {
    const int64_t n = B * nh * T * hd;
    w.dispatch_flat(
        "kv_write", {bx, output(bk), output(bv), bp},
        {u(n), u(T), u(Cd), u(hd), u(nh), u(cap), u(pos), use_buf, e0(bp), e0(bx), e0(bk), e0(bv)},
        ceil_div(n, 256));
  }
  const int64_t queries = B * nh * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  w.dispatch_flat("attention", {bx, bk, bv, bp, bo},
                  {u(T), u(Cd), u(hd), u(nh), u(cap), u(pos), use_buf, e0(bp), cached ? 1u : 0u,
                   f(scale), u(queries), e0(bx), e0(bk), e0(bv), e0(bo)},
                  static_cast<uint64_t>(queries));
}

void attention(Backend& be, C c) {
  attention_with(wg(be), c.in(0), c.attrs.n_head, c.out(0), c.out(1), c.attrs.pos, nullptr,
                 c.out(2));
}

void attention_at(Backend& be, C c) {
  attention_with(wg(be), c.in(0), c.attrs.n_head, c.out(0), c.out(1), 0, &c.in(1), c.out(2));
}

// matmul: op(a) [M, K] (per batch) times op(b), b f32 (any layout) or Q8_0 ([N, K], trans_b).
void matmul(Backend& be, C c) {
  const Tensor &a = c.in(0), &b = c.in(1), &bias = c.in(2);
  Tensor& out = c.out(0);
  const MatmulSpec& s = c.attrs.spec;
  auto& w = wg(be);
  const bool ta = s.trans_a, tb = s.trans_b;
  const int64_t M = ta ? a.dim(-1) : a.dim(-2), K = ta ? a.dim(-2) : a.dim(-1);
  const int64_t stored_rows = b.dim(-2), stored_cols = b.dim(-1);
  const int64_t N = tb ? (s.b_rows > 0 ? s.b_rows : stored_rows) : stored_cols;
  const int64_t Bt = out.rank() == 3 ? out.dim(0) : 1;
  const int64_t sab = a.rank() == 3 ? a.dim(-1) * a.dim(-2) : 0;
  const int64_t sam = ta ? 1 : K, sak = ta ? M : 1;
  const uint32_t flags =
      (bias.defined() ? 1u : 0u) | (s.gelu ? 2u : 0u) | (c.attrs.accumulate ? 4u : 0u);
  const Binding ba = w.bind(a), bo = output(w.bind(out));
  const Binding bbias = bias.defined() ? w.bind(bias) : w.unused();

  if (b.dtype() == DType::Q8_0) {
    const int64_t KB = K / 32, rows = Bt * M;
    auto scratch = w.allocate(static_cast<size_t>(rows * KB * 9 * 4));
    const Tensor qa(scratch, 0, Shape({rows * KB * 9}), DType::U32);
    const Binding bq = w.bind(qa);
    w.dispatch_flat("quantize_rows", {ba, output(bq)},
                    {u(rows), u(KB), e0(ba), u(sam), u(sak), u(M), u(sab)},
                    ceil_div(static_cast<uint64_t>(rows * KB), 64));
    const size_t row_bytes = dtype_bytes(DType::Q8_0, K);
    const int64_t per = rows_per_binding(w, row_bytes);
    for (int64_t n0 = 0; n0 < N; n0 += per) {
      const int64_t nc = std::min(per, N - n0);
      const Binding bw =
          w.bind(b, static_cast<size_t>(n0) * row_bytes, static_cast<size_t>(nc) * row_bytes);
      const std::vector<uint32_t> params = {u(rows),       u(N),   u(KB),     u(n0),      u(nc),
                                            bw.first_byte, e0(bo), e0(bbias), f(s.alpha), flags};
      if (rows <= 8 && !w.split_decode())  // a CPU adapter: a thread per weight row
        w.dispatch_flat("matmul_q8_0_rows", {bq, bw, bbias, bo}, params, ceil_div(nc, 64));
      else
        w.dispatch_flat("matmul_q8_0", {bq, bw, bbias, bo}, params,
                        ceil_div(static_cast<uint64_t>(rows * nc), 8));
    }
    return;
  }

  const int64_t swb = b.rank() == 3 ? stored_rows * stored_cols : 0;
  const int64_t swk = tb ? 1 : stored_cols, swn = tb ? stored_cols : 1;
  // Windows of b's rows when b is one matrix used transposed (the tied LM head: wte).
  const bool windowed = tb && b.rank() == 2;
  const size_t row_bytes = static_cast<size_t>(stored_cols) * 4;
  const int64_t per = windowed ? rows_per_binding(w, row_bytes) : N;
  for (int64_t n0 = 0; n0 < N; n0 += per) {
    const int64_t nc = std::min(per, N - n0);
    const Binding bw = windowed ? w.bind(b, static_cast<size_t>(n0) * row_bytes,
                                         static_cast<size_t>(nc) * row_bytes)
                                : w.bind(b);
    const std::vector<uint32_t> params = {u(M),   u(N),   u(K),      u(n0),      u(nc),  e0(ba),
                                          u(sab), u(sam), u(sak),    e0(bw),     u(swb), u(swk),
                                          u(swn), e0(bo), e0(bbias), f(s.alpha), flags};
    if (Bt == 1 && M <= 8 && w.split_decode()) {  // decode on a GPU: K split in a workgroup
      std::vector<uint32_t> split = params;
      const uint32_t cw = 8;
      split.insert(split.end(), {cw, swk == 1 ? 1u : 0u});
      w.dispatch_flat("matmul_split", {ba, bw, bbias, bo}, split, ceil_div(nc, cw));
    } else if (Bt == 1 && M <= 8) {  // decode on a CPU adapter: a thread per column
      w.dispatch_flat("matmul_rows", {ba, bw, bbias, bo}, params, ceil_div(nc, 64));
    } else
      w.dispatch("matmul", {ba, bw, bbias, bo}, params, u(ceil_div(nc, 16)), u(ceil_div(M, 16)),
                 u(Bt));
  }
}

}  // namespace

void WebGpuBackend::register_kernels() {
  add_kernel(Op::add, add);
  add_kernel(Op::gelu, gelu);
  add_kernel(Op::softmax, softmax);
  add_kernel(Op::layernorm, layernorm);
  add_kernel(Op::argmax_rows, argmax_rows);
  add_kernel(Op::embedding, embedding);
  add_kernel(Op::embedding, dtype_key({DType::U32, DType::Q8_0}), embedding);
  add_kernel(Op::split_heads, split_heads);
  add_kernel(Op::merge_heads, merge_heads);
  add_kernel(Op::attention, attention);
  add_kernel(Op::attention_at, attention_at);
  add_kernel(Op::matmul, matmul);
  add_kernel(Op::matmul, dtype_key({DType::F32, DType::Q8_0, DType::F32}), matmul);
}

}  // namespace forge::webgpu
