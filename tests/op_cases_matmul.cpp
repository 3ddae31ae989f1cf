// The op cases of matmul, its epilogues and the fused matmul ops (see op_cases.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "op_case_util.h"

namespace forge::test::cases {

// ---------------------------------------------------------------------------------------
// matmul
// ---------------------------------------------------------------------------------------

enum class Batch { None, A, B, Both };

struct MatmulCase {
  bool ta = false, tb = false, bias = false;
  Batch batch = Batch::None;
  bool cut_b_rows = false;  // store 3 extra rows in b and pass b_rows to ignore them
  float alpha = 1.0f;
  int64_t B = 1, M = 1, K = 1, N = 1;
  // Store this many extra rows in front of (unbatched) a and pass the view past them: a
  // tensor at a nonzero element offset.
  int64_t a_skip_rows = 0;
  bool gelu = false;        // the epilogue MatmulSpec::gelu
  bool accumulate = false;  // matmul_add_ onto an extra input acc (the last one) instead
};

void add_matmul_case(Cases& cs, const MatmulCase& c) {
  const bool a_batched = c.batch == Batch::A || c.batch == Batch::Both;
  const bool b_batched = c.batch == Batch::B || c.batch == Batch::Both;
  const int64_t used_rows = c.tb ? c.N : c.K;  // rows of stored b that take part
  const int64_t stored_rows = c.cut_b_rows ? used_rows + 3 : used_rows;
  Dims ashape = c.ta ? Dims{c.K, c.M} : Dims{c.M, c.K};
  const int64_t a_skip = c.a_skip_rows, a_cols = ashape[1];
  ashape[0] += a_skip;
  Dims bshape = c.tb ? Dims{stored_rows, c.K} : Dims{stored_rows, c.N};
  if (a_batched) ashape.insert(ashape.begin(), c.B);
  if (b_batched) bshape.insert(bshape.begin(), c.B);

  static const char* kBatchNames[] = {"none", "a", "b", "ab"};
  std::string variant = "ta=" + std::to_string(c.ta) + ",tb=" + std::to_string(c.tb) + "," +
                        (c.bias ? "bias" : "nobias") +
                        ",batch=" + kBatchNames[static_cast<int>(c.batch)];
  if (c.cut_b_rows) variant += ",b_rows=" + std::to_string(used_rows);
  if (c.alpha != 1.0f) variant += ",alpha=" + num(c.alpha);
  if (a_skip > 0) variant += ",a_view=" + std::to_string(a_skip);
  if (c.gelu) variant += ",gelu";
  std::string shape =
      "m=" + std::to_string(c.M) + ",k=" + std::to_string(c.K) + ",n=" + std::to_string(c.N);
  if (a_batched || b_batched) shape += ",B=" + std::to_string(c.B);

  MatmulSpec spec;
  spec.trans_a = c.ta;
  spec.trans_b = c.tb;
  spec.alpha = c.alpha;
  spec.b_rows = c.cut_b_rows ? used_rows : 0;
  spec.gelu = c.gelu;

  ref::MatmulDims d;
  d.batch = (a_batched || b_batched) ? c.B : 1;
  d.a_batched = a_batched;
  d.b_batched = b_batched;
  d.m = c.M;
  d.k = c.K;
  d.n = c.N;
  d.trans_a = c.ta;
  d.trans_b = c.tb;
  d.b_stored_rows = stored_rows;
  d.alpha = c.alpha;
  d.gelu = c.gelu;

  const bool bias = c.bias, accumulate = c.accumulate;
  const int64_t N = c.N;
  // matmul_add_'s accumulator: the output's shape, after the other inputs.
  Dims acc_shape{c.M, c.N};
  if (a_batched || b_batched) acc_shape.insert(acc_shape.begin(), c.B);
  const int acc_index = bias ? 3 : 2;
  // |gelu'| <= 1.13: the epilogue passes the product's rounding error on, barely grown.
  const double tol_scale = c.gelu ? 1.2 : 1.0;
  cs.add(
      accumulate ? "matmul_add_" : "matmul", variant, shape,
      [ashape, bshape, bias, N, accumulate, acc_shape](CaseRng& r) {
        Inputs in{F(r, ashape), F(r, bshape)};
        if (bias) in.push_back(F(r, {N}));
        if (accumulate) in.push_back(F(r, acc_shape));
        return in;
      },
      [spec, bias, a_skip, accumulate, acc_index](const std::vector<Tensor>& t) {
        const Tensor a = a_skip > 0 ? t[0].narrow_rows(a_skip, t[0].dim(0) - a_skip) : t[0];
        const Tensor b_ = bias ? t[2] : Tensor();
        if (!accumulate) return Outputs{host(matmul(a, t[1], spec, b_))};
        Tensor acc = t[static_cast<size_t>(acc_index)];
        matmul_add_(acc, a, t[1], spec, b_);
        return Outputs{host(acc)};
      },
      [d, bias, a_skip, a_cols, accumulate, acc_index, tol_scale](const Inputs& x) {
        Vec a = W(x[0]);
        a.erase(a.begin(), a.begin() + a_skip * a_cols);
        const Vec bias_v = bias ? W(x[2]) : Vec{};
        Vec mag;
        Expected e;
        e.value = accumulate ? ref::matmul_add(W(x[static_cast<size_t>(acc_index)]), a, W(x[1]),
                                               bias_v, d, &mag)
                             : ref::matmul(a, W(x[1]), bias_v, d, &mag);
        for (double s : mag) e.tol.push_back(tol_scale * reduction_tol(kFwdTol, s));
        return Exp{e};
      },
      accumulate ? std::vector<int>{acc_index} : std::vector<int>{});
}

// layernorm_matmul: a GPU's fused GEMV (one row: [1, K] and [B, 1, K]; N odd, N % 4 == 0,
// bias, gelu; K up to its 2048 limit, where the GEMV also splits k; CUDA's takes up to 8
// rows of N % 4 == 0: 8 x 768 its largest block of rows, 1 x 3072 a long staged row) and
// its fallbacks (several rows; 9 rows; K > 2048; w stored [N, K] with trans_b), against
// layernorm then matmul in float64.
void add_layernorm_matmul(Cases& cs) {
  struct LnCase {
    Dims x;     // [.., R, K]
    int64_t N;  // w: [K, N] ([N, K] with trans_b)
    bool bias, gelu, trans_b = false;
  };
  const std::vector<LnCase> list = {{{1, 48}, 37, true, false},
                                    {{1, 64}, 20, false, true},
                                    {{2, 1, 40}, 24, true, true},
                                    {{1, 2048}, 5, true, false},
                                    {{3, 48}, 33, true, true},
                                    {{1, 2100}, 6, false, false},
                                    {{1, 768}, 96, true, true},
                                    {{1, 48}, 37, true, false, true},
                                    {{1, 768}, 1003, false, false, true},
                                    {{1, 2048}, 9, false, true, true},
                                    {{2, 40}, 11, true, false, true},
                                    {{1, 2100}, 5, false, false, true},
                                    {{8, 768}, 64, true, true},
                                    {{9, 64}, 20, true, false},
                                    {{1, 3072}, 24, false, true}};
  for (const LnCase& c : list) {
    const Dims xd = c.x;
    const int64_t K = xd.back(), N = c.N, R = numel(xd) / K;
    const bool bias = c.bias, gelu = c.gelu, tb = c.trans_b;
    const float eps = 1e-5f;
    std::string variant = bias ? "bias" : "nobias";
    if (gelu) variant += ",gelu";
    if (tb) variant += ",trans_b";
    const ref::MatmulDims d{
        .m = R, .k = K, .n = N, .trans_b = tb, .b_stored_rows = tb ? N : K, .gelu = gelu};
    cs.add(
        "layernorm_matmul", variant, "x=" + dims_str(xd) + ",N=" + std::to_string(N),
        [xd, K, N, bias, tb](CaseRng& r) {
          Inputs in{F(r, xd), F(r, {K}), F(r, {K}), tb ? F(r, {N, K}) : F(r, {K, N})};
          if (bias) in.push_back(F(r, {N}));
          return in;
        },
        [eps, bias, gelu, tb](const std::vector<Tensor>& t) {
          return Outputs{host(layernorm_matmul(
              t[0], t[1], t[2], eps, t[3], {.trans_b = tb, .gelu = gelu}, bias ? t[4] : Tensor()))};
        },
        [d, K, eps, bias](const Inputs& x) {
          const Vec h = ref::layernorm(W(x[0]), W(x[1]), W(x[2]), K, eps);
          Vec mag;
          Expected e;
          e.value = ref::matmul(h, W(x[3]), bias ? W(x[4]) : Vec{}, d, &mag);
          for (double m : mag) e.tol.push_back(1.2 * reduction_tol(kFwdTol, m));
          return Exp{e};
        });
  }
}

// matmul_add_layernorm_matmul: a GPU's one-dispatch chain (one row; N1, N2 multiples of
// 4; b1 given; GPT-2's proj -> fc and fc_proj -> next qkv seams; a row of 1040: more rows of
// the second product than its workgroups load before waiting; 52 and 1044 columns: a last
// workgroup of 16 (8 with K1 > 1024) with only 4) and the cases that take the
// two kernels (N1 or N2 odd, several rows, a batch, no b1), against matmul_add then
// layernorm then matmul in float64. Outputs: the product, then x_new (x itself must stay
// as it was: the harness compares the inputs).
void add_matmul_add_layernorm_matmul(Cases& cs) {
  struct SeamCase {
    Dims x;          // [.., R, N1]
    int64_t K1, N2;  // a: [.., R, K1], w1: [K1, N1], w2: [N1, N2]
    bool b1, b2, gelu;
  };
  const std::vector<SeamCase> list = {
      {{1, 48}, 40, 36, true, true, true},     {{1, 64}, 64, 20, true, false, false},
      {{1, 37}, 9, 24, true, true, false},     {{3, 48}, 40, 36, true, true, true},
      {{1, 48}, 40, 33, true, true, false},    {{1, 48}, 40, 36, false, true, false},
      {{2, 1, 48}, 40, 36, true, true, true},  {{1, 768}, 3072, 2304, true, true, false},
      {{1, 768}, 768, 3072, true, true, true}, {{1, 1040}, 24, 20, true, true, true},
      {{1, 52}, 40, 36, true, true, false},    {{1, 1044}, 1100, 20, true, false, true}};
  for (const SeamCase& c : list) {
    const Dims xd = c.x;
    const int64_t N1 = xd.back(), R = numel(xd) / N1, K1 = c.K1, N2 = c.N2;
    Dims ad = xd;
    ad.back() = K1;
    const bool b1 = c.b1, b2 = c.b2, gelu = c.gelu;
    const float eps = 1e-5f;
    std::string variant = std::string(b1 ? "b1" : "nob1") + (b2 ? ",b2" : ",nob2");
    if (gelu) variant += ",gelu";
    // Inputs: x, a, w1, gamma, beta, w2, then b1 and b2 when given.
    constexpr int ib1 = 6;
    const int ib2 = b1 ? 7 : 6;
    const ref::MatmulDims d1{.m = R, .k = K1, .n = N1, .b_stored_rows = K1};
    const ref::MatmulDims d2{.m = R, .k = N1, .n = N2, .b_stored_rows = N1, .gelu = gelu};
    cs.add(
        "matmul_add_layernorm_matmul", variant,
        "x=" + dims_str(xd) + ",K1=" + std::to_string(K1) + ",N2=" + std::to_string(N2),
        [xd, ad, N1, K1, N2, b1, b2](CaseRng& r) {
          Inputs in{F(r, xd), F(r, ad), F(r, {K1, N1}), F(r, {N1}), F(r, {N1}), F(r, {N1, N2})};
          if (b1) in.push_back(F(r, {N1}));
          if (b2) in.push_back(F(r, {N2}));
          return in;
        },
        [eps, b1, b2, gelu, ib2](const std::vector<Tensor>& t) {
          const ResidualProduct r = matmul_add_layernorm_matmul(
              t[0], t[1], t[2], b1 ? t[static_cast<size_t>(ib1)] : Tensor(), t[3], t[4], eps, t[5],
              {.gelu = gelu}, b2 ? t[static_cast<size_t>(ib2)] : Tensor());
          return Outputs{host(r.out), host(r.x)};
        },
        [d1, d2, N1, eps, b1, b2, ib2](const Inputs& in) {
          Vec mag1, mag2;
          Expected ex, eo;
          ex.value = ref::matmul_add(W(in[0]), W(in[1]), W(in[2]),
                                     b1 ? W(in[static_cast<size_t>(ib1)]) : Vec{}, d1, &mag1);
          for (double m : mag1) ex.tol.push_back(reduction_tol(kFwdTol, m));
          const Vec h = ref::layernorm(ex.value, W(in[3]), W(in[4]), N1, eps);
          eo.value =
              ref::matmul(h, W(in[5]), b2 ? W(in[static_cast<size_t>(ib2)]) : Vec{}, d2, &mag2);
          // x's rounding error reaches the product through the layernorm: twice the tolerance
          // of layernorm_matmul's cases.
          for (double m : mag2) eo.tol.push_back(2.4 * reduction_tol(kFwdTol, m));
          return Exp{eo, ex};
        });
  }
}

// The epilogues (gelu, matmul_add_) on every kernel path: the small odd shape, GEMVs (M = 1)
// with N odd (37: scalar columns), N % 8 != 0 but N % 4 == 0 (20: vec4 loads, a half-empty
// last column group), k long enough to split (785 over 33 rows: tiles split k; 4096 over 5
// columns: the GEMV splits), the 128x128 kernel, and GPT-2's decode products.
void add_matmul_epilogues(Cases& cs) {
  struct Mkn {
    int64_t m, k, n;
  };
  const std::vector<Mkn> shapes = {{5, 9, 7},     {1, 64, 37},    {1, 96, 20}, {1, 785, 24},
                                   {33, 785, 17}, {130, 67, 257}, {1, 4096, 5}};
  for (bool accumulate : {false, true})
    for (size_t s = 0; s < shapes.size(); ++s)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          // Rotate bias, batch, alpha (and gelu for matmul_add_) over the shapes.
          const size_t k = s + static_cast<size_t>(2 * ta + tb);
          MatmulCase c;
          c.ta = ta;
          c.tb = tb;
          c.bias = k % 2 == 0;
          c.batch = static_cast<Batch>((k / 2) % 4);
          c.alpha = k % 3 == 0 ? -0.5f : 1.0f;
          c.gelu = !accumulate || k % 3 != 1;
          c.accumulate = accumulate;
          c.B = 2;
          c.M = shapes[s].m;
          c.K = shapes[s].k;
          c.N = shapes[s].n;
          add_matmul_case(cs, c);
        }
  // GPT-2 124M decode: the MLP's x @ W_fc + b then GELU, and the residual x += h @ W_proj + b.
  MatmulCase fc;
  fc.bias = fc.gelu = true;
  fc.K = 768;
  fc.N = 3072;
  add_matmul_case(cs, fc);
  MatmulCase proj;
  proj.bias = proj.accumulate = true;
  proj.K = 3072;
  proj.N = 768;
  add_matmul_case(cs, proj);
}

void add_matmul(Cases& cs) {
  // Every combination of the flags on a small odd shape.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int bias = 0; bias < 2; ++bias)
        for (Batch batch : {Batch::None, Batch::A, Batch::B, Batch::Both})
          for (int cut = 0; cut < 2; ++cut)
            for (float alpha : {1.0f, -0.375f}) {
              MatmulCase c;
              c.ta = ta;
              c.tb = tb;
              c.bias = bias;
              c.batch = batch;
              c.cut_b_rows = cut;
              c.alpha = alpha;
              c.B = 3;
              c.M = 5;
              c.K = 9;
              c.N = 7;
              add_matmul_case(cs, c);
            }

  // Shape lists, each shape with all four transpose combinations; the other flags rotate
  // (starting at `phase`) so that every flag meets every shape family somewhere.
  struct Mkn {
    int64_t m, k, n;
  };
  auto add_rotating = [&cs](const std::vector<Mkn>& shapes, size_t phase, float alpha) {
    for (size_t s = 0; s < shapes.size(); ++s)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          const size_t k = phase + s + static_cast<size_t>(2 * ta + tb);
          MatmulCase c;
          c.ta = ta;
          c.tb = tb;
          c.bias = k % 2 == 0;
          c.batch = static_cast<Batch>(k % 4);
          c.cut_b_rows = (k / 2) % 2 == 1;
          c.alpha = k % 3 == 0 ? alpha : 1.0f;
          c.B = 2;
          c.M = shapes[s].m;
          c.K = shapes[s].k;
          c.N = shapes[s].n;
          add_matmul_case(cs, c);
        }
  };
  // Awkward shapes (GEMV m = 1, dimensions 1, 17, 33, 785, tails of every register block).
  add_rotating({{1, 785, 17},
                {33, 785, 17},
                {17, 33, 1},
                {1, 1, 1},
                {33, 17, 785},
                {1, 17, 33},
                {65, 130, 97},
                {128, 256, 64},
                {3, 1, 33},
                {2, 33, 17},
                {4, 64, 33},
                {7, 5, 40}},
               0, 0.5f);
  // The 128x128 kernel of GPUs (matmul_big: M, N >= 128 and K >= 64): edge tiles in
  // m, n and k (k not a multiple of its step 8 or of 4), whole tiles, and row lengths that
  // are multiples of 4 elements next to ones that are not. K >= 512 over few tiles splits k
  // over workgroups (unbatched; 2 and 3 splits, one ending mid-step) plus an ordered reduce.
  add_rotating({{130, 67, 257},
                {256, 64, 128},
                {129, 100, 131},
                {200, 72, 144},
                {130, 600, 140},
                {129, 777, 128}},
               1, -0.75f);
  // Views at an offset into a: 1 row of 72 (aligned, vec4) or 67 (scalar) elements in.
  for (const Mkn& s : std::vector<Mkn>{{136, 72, 132}, {130, 67, 129}})
    for (int ta = 0; ta < 2; ++ta) {
      MatmulCase c;
      c.ta = ta;
      c.bias = true;
      c.M = s.m;
      c.K = s.k;
      c.N = s.n;
      c.a_skip_rows = 1;
      add_matmul_case(cs, c);
    }

  // GPT-2 shapes: the tied LM head over the full vocabulary (a few rows), and attention
  // against a KV cache [h, cap=32, hd] of which 17 rows are filled.
  MatmulCase head;
  head.tb = true;
  head.M = 3;
  head.K = 64;
  head.N = 50257;
  add_matmul_case(cs, head);
  MatmulCase qk;
  qk.tb = true;
  qk.batch = Batch::Both;
  qk.cut_b_rows = true;  // stored rows 17 + 3; the real cache has more, the rule is the same
  qk.alpha = 0.125f;
  qk.B = 12;
  qk.M = 5;
  qk.K = 64;
  qk.N = 17;
  add_matmul_case(cs, qk);
  MatmulCase av;
  av.batch = Batch::Both;
  av.cut_b_rows = true;
  av.B = 12;
  av.M = 5;
  av.K = 17;
  av.N = 64;
  add_matmul_case(cs, av);
}

// Every flag combination of the matmul kernels (trans_a, trans_b, bias, gelu, accumulate;
// batch and alpha rotating) on two shapes that the big kernels take (M, N >= 128, K >= 64)
// with partial tiles of 64 and 128 in m and n and k not a multiple of the step 8 (nor of the
// k_split of 3 splits). test_ops_reference.cpp runs them on every tile kernel of a GPU.
void add_matmul_flags(Cases& cs) {
  struct Mkn {
    int64_t m, k, n;
  };
  const Mkn shapes[] = {{130, 100, 200}, {200, 67, 129}};
  for (int flags = 0; flags < 32; ++flags) {
    MatmulCase c;
    c.ta = (flags & 1) != 0;
    c.tb = (flags & 2) != 0;
    c.bias = (flags & 4) != 0;
    c.gelu = (flags & 8) != 0;
    c.accumulate = (flags & 16) != 0;
    // Batch and shape vary within each transpose pair / flag value.
    c.batch = static_cast<Batch>((flags ^ (flags >> 2)) % 4);
    c.alpha = flags % 3 == 0 ? -0.75f : 1.0f;
    c.B = 2;
    const Mkn& s = shapes[std::popcount(static_cast<unsigned>(flags)) % 2];
    c.M = s.m;
    c.K = s.k;
    c.N = s.n;
    add_matmul_case(cs, c);
  }
}

}  // namespace forge::test::cases
