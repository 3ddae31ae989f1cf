// The op cases of the elementwise, row, index, head-layout and attention ops (see op_cases.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "op_case_util.h"

namespace forge::test::cases {

// ---------------------------------------------------------------------------------------
// add, add_, scale, scale_, gelu, gelu_bwd: elementwise
// ---------------------------------------------------------------------------------------

void add_elementwise(Cases& cs) {
  const std::vector<Dims> shapes = {{1},     {17},     {1, 1},     {3, 17},
                                    {5, 33}, {7, 785}, {2, 50257}, {2, 3, 17}};
  for (const Dims& d : shapes) {
    const int64_t C = d.back();
    for (bool row : {false, true}) {
      const Dims bshape = row ? Dims{C} : d;
      const std::string variant = row ? "b=row" : "b=full";
      InputsFn in = [d, bshape](CaseRng& r) { return Inputs{F(r, d), F(r, bshape)}; };
      RefFn rf = [C](const Inputs& x) {
        return Exp{abs_tol(ref::add(W(x[0]), W(x[1]), C), kFwdTol)};
      };
      cs.add(
          "add", variant, dims_str(d), in,
          [](const std::vector<Tensor>& t) { return Outputs{host(add(t[0], t[1]))}; }, rf);
      cs.add("add_", variant, dims_str(d), in,
             [](const std::vector<Tensor>& t) {
               Tensor a = t[0];
               add_(a, t[1]);
               return Outputs{host(a)};
             },
             rf, {0});
    }
  }

  for (const Dims& d : std::vector<Dims>{{1}, {17}, {5, 33}, {3, 785}, {2, 50257}}) {
    for (float s : {2.5f, -0.375f, 0.0f}) {
      InputsFn in = [d](CaseRng& r) { return Inputs{F(r, d)}; };
      RefFn rf = [s](const Inputs& x) { return Exp{abs_tol(ref::scale(W(x[0]), s), kFwdTol)}; };
      cs.add(
          "scale", "s=" + num(s), dims_str(d), in,
          [s](const std::vector<Tensor>& t) { return Outputs{host(scale(t[0], s))}; }, rf);
      cs.add("scale_", "s=" + num(s), dims_str(d), in,
             [s](const std::vector<Tensor>& t) {
               Tensor x = t[0];
               scale_(x, s);
               return Outputs{host(x)};
             },
             rf, {0});
    }
  }

  // Ranges: the usual [-2, 2], and [-20, 20] where tanh saturates (an exp-based tanh that
  // overflows gives NaN there).
  for (const Dims& d : std::vector<Dims>{{1}, {17}, {3, 33}, {5, 785}, {2, 50257}}) {
    for (float range : {2.0f, 20.0f}) {
      const std::string variant = "range=" + num(range);
      cs.add(
          "gelu", variant, dims_str(d),
          [d, range](CaseRng& r) { return Inputs{F(r, d, -range, range)}; },
          [](const std::vector<Tensor>& t) { return Outputs{host(gelu(t[0]))}; },
          [](const Inputs& x) { return Exp{abs_tol(ref::gelu(W(x[0])), kFwdTol)}; });
      cs.add(
          "gelu_bwd", variant, dims_str(d),
          [d, range](CaseRng& r) {
            return Inputs{F(r, d, -range, range), F(r, d)};
          },
          [](const std::vector<Tensor>& t) { return Outputs{host(gelu_bwd(t[0], t[1]))}; },
          [](const Inputs& x) { return Exp{abs_tol(ref::gelu_bwd(W(x[0]), W(x[1])), kBwdTol)}; });
    }
  }
}

// ---------------------------------------------------------------------------------------
// softmax, softmax_bwd
// ---------------------------------------------------------------------------------------

struct SoftmaxCase {
  Dims dims;
  bool causal = false;
  int64_t offset = 0;
  float range = 2.0f;
};

std::string softmax_variant(const SoftmaxCase& c) {
  std::string v = c.causal ? "causal,offset=" + std::to_string(c.offset) : "plain";
  if (c.range != 2.0f) v += ",range=" + num(c.range);
  return v;
}

void add_softmax(Cases& cs) {
  std::vector<SoftmaxCase> list = {
      {{17}},
      {{3, 1}},
      {{1, 1}},
      {{5, 17}},
      {{7, 33}},
      {{3, 785}},
      {{2, 50257}},
      {{2, 3, 33}},
      {{3, 33}, false, 0, 80.0f},  // exp(80) overflows float: the row max must be subtracted
      // causal, offset 0 (prefill): T = S
      {{1, 1, 1}, true, 0},
      {{17, 17}, true, 0},
      {{3, 17, 17}, true, 0},
      {{2, 33, 33}, true, 0},
      {{2, 33, 33}, true, 0, 80.0f},
      // causal, offset > 0 (chunked prefill / decode against a KV cache)
      {{2, 5, 17}, true, 12},
      {{3, 1, 33}, true, 32},
      {{2, 4, 20}, true, 3},
      {{1, 6, 8}, true, 5},  // rows 3..5 see past the end: nothing masked there
      {{2, 3, 785}, true, 780},
  };
  for (const SoftmaxCase& c : list) {
    const Dims d = c.dims;
    const float range = c.range;
    const bool causal = c.causal;
    const int64_t offset = c.offset;
    const int64_t S = d.back();
    cs.add(
        "softmax", softmax_variant(c), dims_str(d),
        [d, range](CaseRng& r) { return Inputs{F(r, d, -range, range)}; },
        [causal, offset](const std::vector<Tensor>& t) {
          return Outputs{host(softmax(t[0], causal, offset))};
        },
        [d, causal, offset](const Inputs& x) {
          Expected e;
          e.value = ref::softmax(W(x[0]), d, causal, offset);
          for (double v : e.value) e.tol.push_back(v == 0.0 ? 0.0 : kFwdTol * v + kUnderflowFloor);
          return Exp{e};
        });
    if (c.range != 2.0f) continue;
    // softmax_bwd takes y = a real (rounded) softmax output, causal ones with exact zeros.
    cs.add(
        "softmax_bwd", softmax_variant(c), dims_str(d),
        [d, causal, offset](CaseRng& r) {
          HostTensor x = F(r, d);
          const Vec y = ref::softmax(W(x), d, causal, offset);
          x.f32.assign(y.begin(), y.end());
          return Inputs{x, F(r, d)};
        },
        [](const std::vector<Tensor>& t) { return Outputs{host(softmax_bwd(t[0], t[1]))}; },
        [S](const Inputs& x) {
          const Vec y = W(x[0]), dy = W(x[1]);
          Expected e;
          e.value = ref::softmax_bwd(y, dy, S);
          // Error propagation of y * (dy - sum(y * dy)): relative to the element's terms;
          // masked entries (y = 0) must come out exactly 0.
          for (size_t r0 = 0; r0 < y.size(); r0 += sz(S)) {
            double mag = 0.0;
            for (int64_t j = 0; j < S; ++j) mag += y[r0 + sz(j)] * std::fabs(dy[r0 + sz(j)]);
            for (int64_t j = 0; j < S; ++j) {
              const size_t i = r0 + sz(j);
              e.tol.push_back(kBwdTol * y[i] * (std::fabs(dy[i]) + mag));
            }
          }
          return Exp{e};
        });
  }
}

// ---------------------------------------------------------------------------------------
// layernorm, layernorm_bwd
// ---------------------------------------------------------------------------------------

void add_layernorm(Cases& cs) {
  struct LnCase {
    Dims dims;
    float eps = 1e-5f;
    float mean = 0.0f;  // added to x: a one-pass E[x^2] - E[x]^2 variance loses it all
  };
  const std::vector<LnCase> list = {
      {{3, 1}},      {{1, 17}},    {{5, 17}},        {{7, 33}}, {{3, 785}},
      {{2, 3, 768}}, {{2, 50257}}, {{5, 33}, 1e-3f}, {{17}},    {{3, 785}, 1e-5f, 50.0f},
      {{300, 33}},  // 300 rows: the parameter pass sums 5 blocks of 64 rows
  };
  for (const LnCase& c : list) {
    const Dims d = c.dims;
    const int64_t C = d.back();
    const float eps = c.eps, mean = c.mean;
    std::string variant = "eps=" + num(eps);
    if (mean != 0.0f) variant += ",mean=" + num(mean);
    auto make_x = [d, mean](CaseRng& r) {
      HostTensor x = F(r, d);
      for (float& v : x.f32) v += mean;
      return x;
    };
    cs.add(
        "layernorm", variant, dims_str(d),
        [make_x, C](CaseRng& r) {
          return Inputs{make_x(r), F(r, {C}), F(r, {C})};
        },
        [eps](const std::vector<Tensor>& t) {
          return Outputs{host(layernorm(t[0], t[1], t[2], eps))};
        },
        [C, eps](const Inputs& x) {
          return Exp{abs_tol(ref::layernorm(W(x[0]), W(x[1]), W(x[2]), C, eps), kFwdTol)};
        });
    if (C == 50257) continue;  // the backward at C = 50257 adds time, not coverage
    cs.add(
        "layernorm_bwd", variant, dims_str(d),
        [make_x, d, C](CaseRng& r) {
          return Inputs{make_x(r), F(r, {C}), F(r, d)};
        },
        [eps](const std::vector<Tensor>& t) {
          const LayerNormGrads g = layernorm_bwd(t[0], t[1], t[2], eps);
          return Outputs{host(g.dx), host(g.dgamma), host(g.dbeta)};
        },
        [C, eps](const Inputs& x) {
          const ref::LayerNormGrads g = ref::layernorm_bwd(W(x[0]), W(x[1]), W(x[2]), C, eps);
          Expected dgamma, dbeta;
          dgamma.value = g.dgamma;
          dbeta.value = g.dbeta;
          for (int64_t j = 0; j < C; ++j) {
            dgamma.tol.push_back(reduction_tol(kFwdTol, g.dgamma_abs[sz(j)]));
            dbeta.tol.push_back(reduction_tol(kFwdTol, g.dbeta_abs[sz(j)]));
          }
          return Exp{abs_tol(g.dx, kBwdTol), dgamma, dbeta};
        });
  }
}

// ---------------------------------------------------------------------------------------
// embedding
// ---------------------------------------------------------------------------------------

void add_embedding(Cases& cs) {
  struct EmbCase {
    Dims ids;
    int64_t V, C;
  };
  const std::vector<EmbCase> list = {{{1}, 1, 1},     {{5}, 7, 1},         {{2, 3}, 33, 17},
                                     {{17}, 33, 785}, {{3, 5}, 50257, 17}, {{1, 1}, 50257, 3}};
  for (const EmbCase& c : list) {
    const Dims idd = c.ids;
    const int64_t V = c.V, C = c.C;
    cs.add(
        "embedding", "",
        "ids=" + dims_str(idd) + ",V=" + std::to_string(V) + ",C=" + std::to_string(C),
        [idd, V, C](CaseRng& r) {
          return Inputs{U(idd, ids_with_ends(r, sz(numel(idd)), static_cast<uint32_t>(V))),
                        F(r, {V, C})};
        },
        [](const std::vector<Tensor>& t) { return Outputs{host(embedding(t[0], t[1]))}; },
        [C](const Inputs& x) { return Exp{exact(ref::embedding(x[0].u32, W(x[1]), C))}; });
  }
}

// ---------------------------------------------------------------------------------------
// split_heads, merge_heads, unsplit_head, unmerge_heads: data movement, exact
// ---------------------------------------------------------------------------------------

void add_heads(Cases& cs) {
  struct HeadDims {
    int64_t B, T, H, D;
    bool rank2;  // qkv given as [T, 3C] (B = 1)
  };
  const std::vector<HeadDims> list = {{2, 5, 3, 4, false},
                                      {1, 17, 1, 1, true},
                                      {1, 3, 12, 64, false},
                                      {3, 1, 2, 33, false},
                                      {1, 7, 4, 17, true}};
  for (const HeadDims& h : list) {
    const int64_t B = h.B, T = h.T, H = h.H, D = h.D, C = h.H * h.D;
    const std::string shape = "B=" + std::to_string(B) + ",T=" + std::to_string(T) +
                              ",H=" + std::to_string(H) + ",D=" + std::to_string(D) +
                              (h.rank2 ? ",rank2" : "");
    const Dims qkv = h.rank2 ? Dims{T, 3 * C} : Dims{B, T, 3 * C};
    for (int part = 0; part < 3; ++part)
      cs.add(
          "split_heads", "part=" + std::to_string(part), shape,
          [qkv](CaseRng& r) { return Inputs{F(r, qkv)}; },
          [H, part](const std::vector<Tensor>& t) {
            return Outputs{host(split_heads(t[0], H, part))};
          },
          [B, T, H, D, part](const Inputs& x) {
            return Exp{exact(ref::split_heads(W(x[0]), B, T, H, D, part))};
          });
    if (h.rank2) continue;  // the other layout ops take rank-3 tensors only
    const Dims heads{B * H, T, D};
    cs.add(
        "merge_heads", "", shape, [heads](CaseRng& r) { return Inputs{F(r, heads)}; },
        [H](const std::vector<Tensor>& t) { return Outputs{host(merge_heads(t[0], H))}; },
        [B, T, H, D](const Inputs& x) {
          return Exp{exact(ref::merge_heads(W(x[0]), B, T, H, D))};
        });
    cs.add(
        "unsplit_head", "", shape,
        [heads](CaseRng& r) {
          return Inputs{F(r, heads), F(r, heads), F(r, heads)};
        },
        [H](const std::vector<Tensor>& t) {
          return Outputs{host(unsplit_head(t[0], t[1], t[2], H))};
        },
        [B, T, H, D](const Inputs& x) {
          return Exp{exact(ref::unsplit_head(W(x[0]), W(x[1]), W(x[2]), B, T, H, D))};
        });
    const Dims merged{B, T, C};
    cs.add(
        "unmerge_heads", "", shape, [merged](CaseRng& r) { return Inputs{F(r, merged)}; },
        [H](const std::vector<Tensor>& t) { return Outputs{host(unmerge_heads(t[0], H))}; },
        [B, T, H, D](const Inputs& x) {
          return Exp{exact(ref::unmerge_heads(W(x[0]), B, T, H, D))};
        });
  }
}

// ---------------------------------------------------------------------------------------
// attention: the fused causal attention, with and without a KV cache
// ---------------------------------------------------------------------------------------

void add_attention(Cases& cs) {
  struct AttnCase {
    int64_t B, T, H, D;
    int64_t cap;  // 0: no caches
    int64_t pos;
    bool rank2 = false;  // qkv given as [T, 3C]
  };
  // Decode (T <= 8 takes a GPU's split-key kernel: cap 320 gives a lone query 10
  // workgroups of one 32-key chunk each, cap 1100 35, a long cache whose last-arriving
  // workgroup combines 35 partials; B=2,T=8,H=4 gives 64 queries 4 workgroups of 2-3
  // chunks each; caps <= 32 one workgroup per query), prefill tiles (T = 80, 130: more than one
  // 64-query tile, not a multiple; T = 9 the smallest prefill), hd 72 and 128 (the hd <= 128
  // prefill variant), B = 2, and cache rows past pos + T that must stay as they were. CUDA's
  // tiled kernel (T >= 64, hd a multiple of 16) at hd 128, 64 and 48 (3 of its 8 column
  // groups), with and without a cache.
  const std::vector<AttnCase> list = {
      {1, 1, 2, 16, 8, 0},       {1, 1, 4, 8, 16, 5},     {1, 1, 2, 64, 80, 70},
      {1, 1, 1, 8, 320, 300},    {2, 3, 2, 16, 10, 4},    {1, 1, 1, 128, 8, 3},
      {1, 1, 2, 16, 0, 0},       {2, 5, 1, 8, 0, 0},      {1, 9, 4, 8, 12, 2},
      {1, 80, 2, 16, 0, 0},      {1, 130, 1, 64, 0, 0},   {1, 80, 2, 16, 120, 33},
      {2, 70, 2, 64, 100, 20},   {1, 20, 1, 72, 30, 3},   {1, 40, 1, 128, 50, 5},
      {1, 9, 4, 8, 0, 0, true},  {2, 8, 4, 16, 320, 290}, {1, 2, 3, 64, 40, 37},
      {1, 1, 1, 64, 1100, 1090}, {1, 64, 1, 128, 0, 0},   {1, 66, 1, 48, 120, 50}};
  for (const AttnCase& a : list) {
    const int64_t B = a.B, T = a.T, H = a.H, D = a.D, cap = a.cap, pos = a.pos, C = H * D;
    const bool cached = cap > 0;
    const std::string shape = "B=" + std::to_string(B) + ",T=" + std::to_string(T) +
                              ",H=" + std::to_string(H) + ",D=" + std::to_string(D) +
                              (cached ? ",cap=" + std::to_string(cap) : "") +
                              (a.rank2 ? ",rank2" : "");
    const Dims qkv = a.rank2 ? Dims{T, 3 * C} : Dims{B, T, 3 * C};
    const Dims cache{B * H, cap, D};
    cs.add(
        "attention", cached ? "cache,pos=" + std::to_string(pos) : "nocache", shape,
        [qkv, cache, cached](CaseRng& r) {
          Inputs in{F(r, qkv)};
          if (cached) {
            in.push_back(F(r, cache));
            in.push_back(F(r, cache));
          }
          return in;
        },
        [H, pos, cached](const std::vector<Tensor>& t) {
          if (!cached) return Outputs{host(attention(t[0], H))};
          const Tensor y = attention(t[0], H, t[1], t[2], pos);
          return Outputs{host(y), host(t[1]), host(t[2])};
        },
        [B, T, H, D, cap, pos, cached](const Inputs& x) {
          const Vec none;
          const ref::Attention r = ref::attention(W(x[0]), B, T, H, D, cached ? W(x[1]) : none,
                                                  cached ? W(x[2]) : none, cap, pos);
          Exp e{abs_tol(r.y, kFwdTol)};
          if (cached) {
            e.push_back(exact(r.k_cache));
            e.push_back(exact(r.v_cache));
          }
          return e;
        },
        cached ? std::vector<int>{1, 2} : std::vector<int>{});
    if (!cached) continue;
    // The same with the position in a device tensor (a replayed decode step): a GPU's
    // decode kernel for every T.
    cs.add(
        "attention_at", "pos=" + std::to_string(pos), shape,
        [qkv, cache, pos](CaseRng& r) {
          return Inputs{F(r, qkv), F(r, cache), F(r, cache), U({1}, {static_cast<uint32_t>(pos)})};
        },
        [H](const std::vector<Tensor>& t) {
          const Tensor y = attention_at(t[0], H, t[1], t[2], t[3]);
          return Outputs{host(y), host(t[1]), host(t[2])};
        },
        [B, T, H, D, cap, pos](const Inputs& x) {
          const ref::Attention r = ref::attention(W(x[0]), B, T, H, D, W(x[1]), W(x[2]), cap, pos);
          return Exp{abs_tol(r.y, kFwdTol), exact(r.k_cache), exact(r.v_cache)};
        },
        std::vector<int>{1, 2});
  }
}

// attention_bwd: dqkv from qkv, attention's output and dy, against float64. Shapes: one
// position, B = 2, a CUDA kernel's 64-query tiles (hd 64: T = 64, 70 and 130, the last tile
// partial) and shapes it leaves to the composition (hd 8, 16).
void add_attention_bwd(Cases& cs) {
  struct BwdCase {
    int64_t B, T, H, D;
  };
  for (const BwdCase& a : std::vector<BwdCase>{{1, 1, 1, 8},
                                               {2, 5, 2, 8},
                                               {1, 9, 4, 16},
                                               {1, 80, 2, 16},
                                               {1, 64, 1, 64},
                                               {2, 70, 2, 64},
                                               {1, 130, 1, 64}}) {
    const int64_t B = a.B, T = a.T, H = a.H, D = a.D, C = H * D;
    const std::string shape = "B=" + std::to_string(B) + ",T=" + std::to_string(T) +
                              ",H=" + std::to_string(H) + ",D=" + std::to_string(D);
    cs.add(
        "attention_bwd", "", shape,
        [B, T, H, D, C](CaseRng& r) {
          const HostTensor qkv = F(r, {B, T, 3 * C});
          // out is attention's output for qkv (the kernels read its rows' sums with dy).
          const Vec y = ref::attention(W(qkv), B, T, H, D, {}, {}, 0, 0).y;
          HostTensor out;
          out.shape = {B, T, C};
          out.f32.assign(y.begin(), y.end());
          return Inputs{qkv, out, F(r, {B, T, C})};
        },
        [H](const std::vector<Tensor>& t) {
          return Outputs{host(attention_bwd(t[0], t[1], t[2], H))};
        },
        [B, T, H, D](const Inputs& x) {
          Vec mag;
          Expected e;
          e.value = ref::attention_bwd(W(x[0]), W(x[2]), B, T, H, D, &mag);
          for (double m : mag) e.tol.push_back(reduction_tol(kBwdTol, m));
          return Exp{e};
        });
  }
}

// ---------------------------------------------------------------------------------------
// Training: sum_rows, scatter_add_rows, gather_nll, ce_bwd, dropout, sumsq, adamw
// ---------------------------------------------------------------------------------------

// argmax_rows: first of equal maxima, NaN as -inf, rows shorter and longer than the GPU's
// 256 invocations and its 2048-column spans, equal maxima seen by different invocations,
// by one, and by different workgroups, a row of only NaN and -inf, GPT-2's vocabulary. The
// reference: a loop in float64.
void add_argmax_rows(Cases& cs) {
  for (const Dims& d :
       std::vector<Dims>{{4, 1}, {3, 17}, {2, 256}, {2, 5, 300}, {6, 601}, {3, 4500}, {1, 50257}}) {
    const int64_t V = d.back(), R = numel(d) / V;
    cs.add(
        "argmax_rows", "", dims_str(d),
        [d, V, R](CaseRng& r) {
          HostTensor x = F(r, d);
          const float nan = std::numeric_limits<float>::quiet_NaN();
          const float inf = std::numeric_limits<float>::infinity();
          auto at = [&](int64_t row, int64_t j) -> float& { return x.f32[sz(row * V + j % V)]; };
          if (R > 1 && V > 1) {
            // Row 0: equal maxima at the end, the middle, j = 300 and 44 + 256 (for a GPU's
            // spans of 2048: in three workgroups of 4500 columns; in two invocations of 300).
            for (int64_t j : {V - 1, V / 2, int64_t{300}, int64_t{44}}) at(0, j) = 7.0f;
            // Row 1: NaN first and in the middle, -inf, the maximum later.
            at(1, 0) = nan;
            at(1, V / 2) = nan;
            at(1, 1) = -inf;
            at(1, V - 1) = 9.0f;
          }
          if (R > 2)  // row 2: NaN and -inf only
            for (int64_t j = 0; j < V; ++j) at(2, j) = j % 3 == 0 ? nan : -inf;
          return Inputs{x};
        },
        [R](const std::vector<Tensor>& t) {
          // argmax_rows, and argmax_rows_into a view 2 rows into a longer tensor.
          std::vector<float> ids, into;
          for (uint32_t i : argmax_rows(t[0]).to_vector<uint32_t>()) ids.push_back(float(i));
          Tensor out = Tensor::zeros({R + 3}, DType::U32, t[0].device());
          Tensor view = out.narrow_rows(2, R);
          argmax_rows_into(t[0], view);
          for (uint32_t i : out.to_vector<uint32_t>()) into.push_back(float(i));
          return Outputs{ids, into};
        },
        [V, R](const Inputs& x) {
          const Vec w = W(x[0]);
          Vec ids;
          for (int64_t r = 0; r < R; ++r) {
            int64_t best = 0;
            double best_v = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < V; ++j) {
              const double v = w[sz(r * V + j)];
              if (!std::isnan(v) && v > best_v) {
                best_v = v;
                best = j;
              }
            }
            ids.push_back(static_cast<double>(best));
          }
          Vec into = {0.0, 0.0};
          into.insert(into.end(), ids.begin(), ids.end());
          into.push_back(0.0);
          return Exp{exact(ids), exact(into)};
        });
  }
}

}  // namespace forge::test::cases
