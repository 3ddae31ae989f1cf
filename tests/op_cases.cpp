// The op case list (see op_cases.h). Tolerances, stated once here:
//   forward ops          1e-4 abs per element;
//   training ops         1e-3 abs per element;
//   long reductions      base * max(1, sum|terms| / 8) (matmul, LM head, sum_rows,
//                        scatter_add_rows, sumsq, layernorm dgamma/dbeta): float32 rounding
//                        grows with what is summed, and the reference reports that sum;
//   probabilities        relative (softmax 1e-4, softmax_bwd and ce_bwd 1e-3 of the element's
//                        own magnitude, over a floor at float32's underflow): with V = 50257
//                        every probability is ~2e-5, below any absolute tolerance worth
//                        having (a 1e-6 floor let a softmax missing 512 of its columns pass);
//   data movement        exact (embedding, heads, attention's cache rows), and
//                        masked/dropped entries exactly 0.
// Inputs are uniform [-2, 2] unless a case says otherwise; ids are in range, with the first
// and last valid id forced in where it matters.
#include "op_cases.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "forge/ops.h"
#include "reference.h"

namespace forge::test {

Tensor HostTensor::to(Device device) const {
  return is_u32 ? Tensor::from_vector(u32, Shape(shape), device)
                : Tensor::from_vector(f32, Shape(shape), device);
}

CaseRng::CaseRng(const std::string& seed_text) {
  // FNV-1a of the text: each case gets its own stream, stable across runs and platforms.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : seed_text) h = (h ^ c) * 0x100000001b3ull;
  state_ = h;
}

uint64_t CaseRng::next() {  // splitmix64
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float CaseRng::uniform(float lo, float hi) {
  const double u = static_cast<double>(next() >> 40) / 16777216.0;  // 24 bits in [0, 1)
  return static_cast<float>(lo + (hi - lo) * u);
}

std::vector<float> CaseRng::floats(size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) x = uniform(lo, hi);
  return v;
}

std::vector<uint32_t> CaseRng::ids(size_t n, uint32_t limit) {
  std::vector<uint32_t> v(n);
  for (uint32_t& x : v) x = static_cast<uint32_t>(next() % limit);
  return v;
}

double reduction_tol(double base, double abs_sum) { return base * std::max(1.0, abs_sum / 8.0); }

namespace {

using ref::Vec;
using Dims = std::vector<int64_t>;
using Inputs = std::vector<HostTensor>;
using Outputs = std::vector<std::vector<float>>;
using Exp = std::vector<Expected>;
using InputsFn = std::function<Inputs(CaseRng&)>;
using RunFn = std::function<Outputs(const std::vector<Tensor>&)>;
using RefFn = std::function<Exp(const Inputs&)>;

constexpr double kFwdTol = 1e-4;
constexpr double kBwdTol = 1e-3;
// The absolute floor under bounds relative to each element: 4x float32's smallest normal
// (1.18e-38). Below it a float32 result keeps no relative precision (it is subnormal or
// flushed to 0), e.g. exp(-160) in a softmax row of range 80; every other value of the
// cases lies orders of magnitude above it (softmax over 50257 columns: ~1e-7 and up).
constexpr double kUnderflowFloor = 4.0 * 1.1754943508222875e-38;

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}
size_t sz(int64_t n) { return static_cast<size_t>(n); }

std::string dims_str(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

HostTensor F(CaseRng& rng, Dims shape, float lo = -2.0f, float hi = 2.0f) {
  HostTensor t;
  t.f32 = rng.floats(sz(numel(shape)), lo, hi);
  t.shape = std::move(shape);
  return t;
}

HostTensor U(Dims shape, std::vector<uint32_t> ids) {
  HostTensor t;
  t.shape = std::move(shape);
  t.u32 = std::move(ids);
  t.is_u32 = true;
  return t;
}

/// n ids below `limit`, with limit - 1 first and 0 last so both ends of the range are hit.
std::vector<uint32_t> ids_with_ends(CaseRng& rng, size_t n, uint32_t limit) {
  std::vector<uint32_t> v = rng.ids(n, limit);
  if (n > 0) v.front() = limit - 1;
  if (n > 1) v.back() = 0;
  return v;
}

Vec W(const HostTensor& t) { return ref::widen(t.f32); }

Expected abs_tol(Vec v, double tol) {
  Expected e;
  e.tol.assign(v.size(), tol);
  e.value = std::move(v);
  return e;
}
Expected exact(Vec v) { return abs_tol(std::move(v), 0.0); }

std::vector<float> host(const Tensor& t) { return t.to_vector<float>(); }

class Cases {
 public:
  void add(const std::string& op, const std::string& variant, const std::string& shape,
           InputsFn inputs, RunFn run, RefFn reference, std::vector<int> mutates = {}) {
    OpCase c;
    c.op = op;
    c.name = op + "/" + (variant.empty() ? "" : variant + "/") + shape;
    c.inputs = [name = c.name, inputs = std::move(inputs)] {
      CaseRng rng(name);
      return inputs(rng);
    };
    c.run = std::move(run);
    c.reference = std::move(reference);
    c.mutates = std::move(mutates);
    list.push_back(std::move(c));
  }
  std::vector<OpCase> list;
};

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

// layernorm_matmul: Vulkan's fused GEMV (one row: [1, K] and [B, 1, K]; N odd, N % 4 == 0,
// bias, gelu; K up to its 2048 limit, where the GEMV also splits k) and its fallbacks
// (several rows; K > 2048; w stored [N, K] with trans_b), against layernorm then matmul in
// float64.
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
                                    {{1, 2100}, 5, false, false, true}};
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

// matmul_add_layernorm_matmul: Vulkan's one-dispatch chain (one row; N1, N2 multiples of
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
    const int ib1 = 6, ib2 = b1 ? 7 : 6;
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
        [eps, b1, b2, gelu, ib1, ib2](const std::vector<Tensor>& t) {
          const ResidualProduct r = matmul_add_layernorm_matmul(
              t[0], t[1], t[2], b1 ? t[static_cast<size_t>(ib1)] : Tensor(), t[3], t[4], eps, t[5],
              {.gelu = gelu}, b2 ? t[static_cast<size_t>(ib2)] : Tensor());
          return Outputs{host(r.out), host(r.x)};
        },
        [d1, d2, N1, eps, b1, b2, ib1, ib2](const Inputs& in) {
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
  // The 128x128 kernel of GPUs (Vulkan's matmul_big: M, N >= 128 and K >= 64): edge tiles in
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
  // Decode (T <= 8 takes Vulkan's split-key kernel: cap 320 gives a lone query 10
  // workgroups of one 32-key chunk each, cap 1100 35, a long cache whose last-arriving
  // workgroup combines 35 partials; B=2,T=8,H=4 gives 64 queries 4 workgroups of 2-3
  // chunks each; caps <= 32 one workgroup per query), prefill tiles (T = 80, 130: more than one
  // 64-query tile, not a multiple; T = 9 the smallest prefill), hd 72 and 128 (the hd <= 128
  // prefill variant), B = 2, and cache rows past pos + T that must stay as they were.
  const std::vector<AttnCase> list = {
      {1, 1, 2, 16, 8, 0},      {1, 1, 4, 8, 16, 5},     {1, 1, 2, 64, 80, 70},
      {1, 1, 1, 8, 320, 300},   {2, 3, 2, 16, 10, 4},    {1, 1, 1, 128, 8, 3},
      {1, 1, 2, 16, 0, 0},      {2, 5, 1, 8, 0, 0},      {1, 9, 4, 8, 12, 2},
      {1, 80, 2, 16, 0, 0},     {1, 130, 1, 64, 0, 0},   {1, 80, 2, 16, 120, 33},
      {2, 70, 2, 64, 100, 20},  {1, 20, 1, 72, 30, 3},   {1, 40, 1, 128, 50, 5},
      {1, 9, 4, 8, 0, 0, true}, {2, 8, 4, 16, 320, 290}, {1, 2, 3, 64, 40, 37},
      {1, 1, 1, 64, 1100, 1090}};
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
    // The same with the position in a device tensor (a replayed decode step): Vulkan's
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
            // Row 0: equal maxima at the end, the middle, j = 300 and 44 + 256 (for Vulkan's
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

void add_training(Cases& cs) {
  for (const Dims& d : std::vector<Dims>{
           {17}, {1, 1}, {1, 17}, {33, 17}, {785, 3}, {5, 785}, {2, 50257}, {3, 5, 33}}) {
    const int64_t C = d.back();
    cs.add(
        "sum_rows", "", dims_str(d), [d](CaseRng& r) { return Inputs{F(r, d)}; },
        [](const std::vector<Tensor>& t) { return Outputs{host(sum_rows(t[0]))}; },
        [C](const Inputs& x) {
          Vec mag;
          Expected e;
          e.value = ref::sum_rows(W(x[0]), C, &mag);
          for (double s : mag) e.tol.push_back(reduction_tol(kFwdTol, s));
          return Exp{e};
        });
  }

  struct ScatterCase {
    Dims ids;
    int64_t C, rows;
    uint32_t id_limit;  // ids drawn below this (small: many repeats; rows above stay 0)
  };
  const std::vector<ScatterCase> scatter = {{{7}, 17, 3, 3},     {{33}, 1, 5, 4},
                                            {{3, 11}, 17, 4, 4}, {{9}, 3, 50257, 50257},
                                            {{1}, 785, 1, 1},    {{40}, 33, 7, 2}};
  for (const ScatterCase& c : scatter) {
    const Dims idd = c.ids;
    Dims sd = idd;
    sd.push_back(c.C);
    const int64_t C = c.C, rows = c.rows;
    const uint32_t limit = c.id_limit;
    cs.add(
        "scatter_add_rows", "id_limit=" + std::to_string(limit),
        "ids=" + dims_str(idd) + ",C=" + std::to_string(C) + ",rows=" + std::to_string(rows),
        [idd, sd, limit](CaseRng& r) {
          return Inputs{U(idd, ids_with_ends(r, sz(numel(idd)), limit)), F(r, sd)};
        },
        [rows](const std::vector<Tensor>& t) {
          return Outputs{host(scatter_add_rows(t[0], t[1], rows))};
        },
        [C, rows](const Inputs& x) {
          Vec mag;
          Expected e;
          e.value = ref::scatter_add_rows(x[0].u32, W(x[1]), rows, C, &mag);
          for (double s : mag) e.tol.push_back(reduction_tol(kFwdTol, s));
          return Exp{e};
        });
  }

  struct NllCase {
    Dims logits;
    float range = 2.0f;
  };
  const std::vector<NllCase> nll = {{{1, 1}},     {{3, 17}},    {{7, 33}},       {{5, 785}},
                                    {{3, 50257}}, {{2, 3, 17}}, {{4, 33}, 50.0f}};
  for (const NllCase& c : nll) {
    const Dims d = c.logits;
    const int64_t V = d.back(), N = numel(d) / V;
    const float range = c.range;
    const std::string variant = range != 2.0f ? "range=" + num(range) : "";
    auto inputs = [d, N, V, range](CaseRng& r) {
      const Dims td(d.begin(), d.end() - 1);
      return Inputs{F(r, d, -range, range),
                    U(td, ids_with_ends(r, sz(N), static_cast<uint32_t>(V)))};
    };
    cs.add(
        "gather_nll", variant, dims_str(d), inputs,
        [](const std::vector<Tensor>& t) { return Outputs{host(gather_nll(t[0], t[1]))}; },
        [V](const Inputs& x) {
          return Exp{abs_tol(ref::gather_nll(W(x[0]), x[1].u32, V), kBwdTol)};
        });
    for (float s : {1.0f / static_cast<float>(N), 2.5f}) {
      cs.add(
          "ce_bwd", (variant.empty() ? "" : variant + ",") + "scale=" + num(s), dims_str(d), inputs,
          [s](const std::vector<Tensor>& t) { return Outputs{host(ce_bwd(t[0], t[1], s))}; },
          [V, s](const Inputs& x) {
            Expected e;
            e.value = ref::ce_bwd(W(x[0]), x[1].u32, V, s);
            // Relative to the probability; at the target the onehot's -1 adds one rounding
            // at magnitude 1 (2^-24, twice for the scale's product).
            for (size_t i = 0; i < e.value.size(); ++i) {
              const bool target = static_cast<int64_t>(i) % V == x[1].u32[i / sz(V)];
              const double p = e.value[i] / s + (target ? 1.0 : 0.0);
              e.tol.push_back(std::fabs(s) * (kBwdTol * p + (target ? 0x1p-23 : 0.0)) +
                              kUnderflowFloor);
            }
            return Exp{e};
          });
    }
  }

  for (const Dims& d : std::vector<Dims>{{1}, {17}, {33, 785}, {3, 50257}}) {
    for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0xDEADBEEF12345678ull}}) {
        if (d.size() == 1 && d[0] == 1 && seed != 42) continue;
        cs.add(
            "dropout", "p=" + num(p) + ",seed=" + std::to_string(seed), dims_str(d),
            [d](CaseRng& r) { return Inputs{F(r, d)}; },
            [p, seed](const std::vector<Tensor>& t) {
              return Outputs{host(dropout(t[0], p, seed))};
            },
            [p, seed](const Inputs& x) {
              Expected e;
              e.value = ref::dropout(W(x[0]), p, seed);
              for (double v : e.value) e.tol.push_back(v == 0.0 ? 0.0 : kFwdTol);
              return Exp{e};
            });
      }
    }
  }

  for (const Dims& d : std::vector<Dims>{{1}, {17}, {1, 1}, {33, 785}, {3, 50257}}) {
    cs.add(
        "sumsq", "", dims_str(d), [d](CaseRng& r) { return Inputs{F(r, d)}; },
        [](const std::vector<Tensor>& t) { return Outputs{host(sumsq(t[0]))}; },
        [](const Inputs& x) {
          const double s = ref::sumsq(W(x[0]));  // every term is positive: sum|terms| = s
          return Exp{abs_tol({s}, reduction_tol(kFwdTol, s))};
        });
  }

  struct AdamCase {
    Dims shape;
    AdamWParams p;  // p.step = the first step
    int steps;
    bool warm;  // m, v start from earlier steps instead of zeros
  };
  auto params = [](float lr, float b1, float b2, float eps, float wd, int64_t step) {
    AdamWParams p;
    p.lr = lr;
    p.beta1 = b1;
    p.beta2 = b2;
    p.eps = eps;
    p.weight_decay = wd;
    p.step = step;
    return p;
  };
  const std::vector<AdamCase> adam = {
      {{17}, params(1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), 3, false},
      {{33, 785}, params(3e-3f, 0.8f, 0.99f, 1e-6f, 0.1f, 1), 3, false},
      {{1}, params(5e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 10), 2, true},
      {{5, 33}, params(1e-2f, 0.0f, 0.5f, 1e-3f, 0.5f, 4), 3, true},
  };
  for (const AdamCase& c : adam) {
    const Dims d = c.shape;
    const AdamWParams p0 = c.p;
    const int steps = c.steps;
    const bool warm = c.warm;
    // Outputs hold parameters moved by ~lr per step: tolerate 1e-5, far below one step.
    const std::string variant = "lr=" + num(p0.lr) + ",b1=" + num(p0.beta1) +
                                ",b2=" + num(p0.beta2) + ",eps=" + num(p0.eps) +
                                ",wd=" + num(p0.weight_decay) + ",step=" + std::to_string(p0.step) +
                                "+" + std::to_string(steps) + (warm ? ",warm" : "");
    cs.add(
        "adamw", variant, dims_str(d),
        [d, steps, warm](CaseRng& r) {
          Inputs in{F(r, d)};
          if (warm) {
            in.push_back(F(r, d, -0.5f, 0.5f));
            in.push_back(F(r, d, 0.0f, 1.0f));  // v >= 0
          } else {
            in.push_back(F(r, d, 0.0f, 0.0f));
            in.push_back(F(r, d, 0.0f, 0.0f));
          }
          for (int s = 0; s < steps; ++s) in.push_back(F(r, d));
          return in;
        },
        [p0, steps](const std::vector<Tensor>& t) {
          Tensor param = t[0], m = t[1], v = t[2];
          for (int s = 0; s < steps; ++s) {
            AdamWParams p = p0;
            p.step = p0.step + s;
            adamw(param, t[3 + static_cast<size_t>(s)], m, v, p);
          }
          return Outputs{host(param), host(m), host(v)};
        },
        [p0, steps](const Inputs& x) {
          ref::AdamWState st{W(x[0]), W(x[1]), W(x[2])};
          for (int s = 0; s < steps; ++s)
            ref::adamw(st, W(x[3 + static_cast<size_t>(s)]), p0.lr, p0.beta1, p0.beta2, p0.eps,
                       p0.weight_decay, p0.step + s);
          return Exp{abs_tol(st.param, 1e-5), abs_tol(st.m, 1e-5), abs_tol(st.v, 1e-5)};
        },
        {0, 1, 2});
  }
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

std::vector<OpCase> build() {
  Cases cs;
  add_elementwise(cs);
  add_matmul(cs);
  add_matmul_epilogues(cs);
  add_layernorm_matmul(cs);
  add_matmul_add_layernorm_matmul(cs);
  add_softmax(cs);
  add_argmax_rows(cs);
  add_layernorm(cs);
  add_embedding(cs);
  add_heads(cs);
  add_attention(cs);
  add_training(cs);
  return std::move(cs.list);
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = build();
  return cases;
}

const std::vector<OpCase>& matmul_flag_cases() {
  static const std::vector<OpCase> cases = [] {
    Cases cs;
    add_matmul_flags(cs);
    return std::move(cs.list);
  }();
  return cases;
}

}  // namespace forge::test
