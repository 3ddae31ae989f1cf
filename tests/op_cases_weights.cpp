// The op cases of weights stored in other dtypes (f16, bf16, q8_0, q4_0; forge/dtype.h):
// matmul and matmul_add_ with such a b [N, K] used transposed, the embedding gathering rows
// of such a table, and the fused ops that run them as their parts. The weights are rounded
// by forge's converter (forge/quantize.h, tested on its own); the reference reads the stored
// bytes back with this file's own decoder and, for the block dtypes, rounds the activations
// as ops.h documents (ref::round_rows_q8), then computes in float64.
#include <cstring>

#include "forge/quantize.h"
#include "io/half.h"
#include "op_case_util.h"

namespace forge::test::cases {
namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return io::f16_to_f32(h);
}

// The values that the stored bytes of a weight of dtype t hold.
std::vector<float> decode(DType t, const std::vector<uint8_t>& raw, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::F16) {
      v[i] = f16_at(raw.data() + 2 * i);
    } else if (t == DType::BF16) {
      uint32_t u = static_cast<uint32_t>(raw[2 * i]) | static_cast<uint32_t>(raw[2 * i + 1]) << 8;
      u <<= 16;
      std::memcpy(&v[i], &u, 4);
    } else if (t == DType::Q8_0) {
      const uint8_t* b = raw.data() + (i / 32) * 34;
      v[i] = f16_at(b) * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
    } else {  // Q4_0: element j of a block in byte j % 16, low nibble first
      const uint8_t* b = raw.data() + (i / 32) * 18;
      const size_t j = i % 32;
      const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
      v[i] = f16_at(b) * static_cast<float>(q - 8);
    }
  }
  return v;
}

// A weight of dtype t: uniform values rounded to t.
HostTensor weight(CaseRng& r, const Dims& shape, DType t) {
  HostTensor h = F(r, shape);
  h.raw = convert_weights(Tensor::from_vector(h.f32, Shape(shape)), t).to_bytes();
  h.dtype = t;
  h.f32 = decode(t, h.raw, h.f32.size());
  return h;
}

// op(a)'s rows as the product sees them: rounded to blocks for the block dtypes.
Vec product_rows(const std::vector<float>& rows, DType t) {
  return dtype_is_block(t) ? ref::round_rows_q8(rows) : ref::widen(rows);
}

// a [B?, M, K] or transposed [B?, K, M] -> op(a) rows [B * M, K].
std::vector<float> op_a_rows(const std::vector<float>& a, int64_t B, int64_t M, int64_t K,
                             bool ta) {
  if (!ta) return a;
  std::vector<float> out(a.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) out[sz((b * M + i) * K + k)] = a[sz(b * K * M + k * M + i)];
  return out;
}

DTypeKey matmul_key(DType t) { return dtype_key({DType::F32, t, DType::F32}); }

constexpr DType kWeightDTypes[] = {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

void add_weight_matmuls(Cases& cs) {
  struct Mkn {
    int64_t m, k, n;
  };
  // Decode rows (m <= 4: the streaming kernels) and prefill rows (packed or tiled), K of one
  // block up to GPT-2's 768, N odd and past a 64-row block.
  const std::vector<Mkn> shapes = {{1, 32, 17}, {1, 768, 40},  {2, 64, 37}, {4, 96, 20},
                                   {5, 64, 33}, {33, 128, 70}, {130, 96, 9}};
  size_t k = 0;
  for (DType t : kWeightDTypes)
    for (const Mkn& s : shapes) {
      ++k;
      const bool bias = k % 2 == 0, gelu = k % 3 == 0, ta = k % 4 == 1, batched = k % 5 == 2;
      const bool accumulate = k % 3 == 1, cut = k % 4 == 3;
      const float alpha = k % 5 == 4 ? -0.5f : 1.0f;
      const int64_t B = batched ? 2 : 1, M = s.m, K = s.k, N = s.n;
      const int64_t stored = cut ? N + 3 : N;  // b_rows cuts the extra rows
      Dims ad = ta ? Dims{K, M} : Dims{M, K};
      if (batched) ad.insert(ad.begin(), B);
      Dims od{M, N};
      if (batched) od.insert(od.begin(), B);
      std::string variant = std::string(dtype_name(t)) + (bias ? ",bias" : "") +
                            (gelu ? ",gelu" : "") + (ta ? ",ta" : "") +
                            (batched ? ",batch=a" : "") + (cut ? ",b_rows" : "");
      if (alpha != 1.0f) variant += ",alpha=" + num(alpha);
      const MatmulSpec spec{
          .trans_a = ta, .trans_b = true, .alpha = alpha, .b_rows = cut ? N : 0, .gelu = gelu};
      const ref::MatmulDims d{.batch = B,
                              .a_batched = batched,
                              .m = M,
                              .k = K,
                              .n = N,
                              .trans_b = true,
                              .b_stored_rows = stored,
                              .alpha = alpha,
                              .gelu = gelu};
      const int acc_index = bias ? 3 : 2;
      cs.add(
          accumulate ? "matmul_add_" : "matmul", variant,
          "m=" + std::to_string(M) + ",k=" + std::to_string(K) + ",n=" + std::to_string(N),
          [ad, od, t, K, N, stored, bias, accumulate](CaseRng& r) {
            Inputs in{F(r, ad), weight(r, {stored, K}, t)};
            if (bias) in.push_back(F(r, {N}));
            if (accumulate) in.push_back(F(r, od));
            return in;
          },
          [spec, bias, accumulate, acc_index](const std::vector<Tensor>& x) {
            const Tensor b = bias ? x[2] : Tensor();
            if (!accumulate) return Outputs{host(matmul(x[0], x[1], spec, b))};
            Tensor acc = x[sz(acc_index)];
            matmul_add_(acc, x[0], x[1], spec, b);
            return Outputs{host(acc)};
          },
          [d, t, B, M, K, ta, bias, accumulate, acc_index](const Inputs& x) {
            const Vec a = product_rows(op_a_rows(x[0].f32, B, M, K, ta), t);
            ref::MatmulDims dd = d;  // op(a) is materialized untransposed
            const Vec bias_v = bias ? W(x[2]) : Vec{};
            Vec mag;
            Expected e;
            e.value = accumulate
                          ? ref::matmul_add(W(x[sz(acc_index)]), a, W(x[1]), bias_v, dd, &mag)
                          : ref::matmul(a, W(x[1]), bias_v, dd, &mag);
            for (double m : mag) e.tol.push_back(1.2 * reduction_tol(kFwdTol, m));
            return Exp{e};
          },
          accumulate ? std::vector<int>{acc_index} : std::vector<int>{});
      cs.list.back().needs = {{Op::matmul, matmul_key(t)}};
    }
}

void add_weight_embeddings(Cases& cs) {
  for (DType t : kWeightDTypes)
    for (const auto& vcn : {std::tuple<int64_t, int64_t, int64_t>{5, 32, 7}, {300, 96, 33}}) {
      // Plain variables: clang 14 (the wasm build's) cannot capture structured bindings.
      const int64_t V = std::get<0>(vcn), C = std::get<1>(vcn), n = std::get<2>(vcn);
      cs.add(
          "embedding", dtype_name(t),
          "V=" + std::to_string(V) + ",C=" + std::to_string(C) + ",n=" + std::to_string(n),
          [V, C, n, t](CaseRng& r) {
            return Inputs{U({n}, ids_with_ends(r, sz(n), static_cast<uint32_t>(V))),
                          weight(r, {V, C}, t)};
          },
          [](const std::vector<Tensor>& x) { return Outputs{host(embedding(x[0], x[1]))}; },
          [C](const Inputs& x) { return Exp{exact(ref::embedding(x[0].u32, W(x[1]), C))}; });
      cs.list.back().needs = {{Op::embedding, dtype_key({DType::U32, t})}};
    }
}

// The fused ops with weights of other dtypes: a backend's fused kernel for them, or their parts.
void add_weight_fused(Cases& cs) {
  for (DType t : kWeightDTypes) {
    const int64_t R = 3, K = 64, N = 20;
    const float eps = 1e-5f;
    cs.add(
        "layernorm_matmul", std::string(dtype_name(t)) + ",bias,gelu", "x=3x64,N=20",
        [t](CaseRng& r) {
          return Inputs{F(r, {R, K}), F(r, {K}), F(r, {K}), weight(r, {N, K}, t), F(r, {N})};
        },
        [eps](const std::vector<Tensor>& x) {
          return Outputs{host(layernorm_matmul(x[0], x[1], x[2], eps, x[3],
                                               {.trans_b = true, .gelu = true}, x[4]))};
        },
        [t, eps](const Inputs& x) {
          const Vec h = ref::layernorm(W(x[0]), W(x[1]), W(x[2]), K, eps);
          const Vec hq = product_rows(std::vector<float>(h.begin(), h.end()), t);
          Vec mag;
          Expected e;
          e.value = ref::matmul(
              hq, W(x[3]), W(x[4]),
              {.m = R, .k = K, .n = N, .trans_b = true, .b_stored_rows = N, .gelu = true}, &mag);
          for (double m : mag) e.tol.push_back(1.2 * reduction_tol(kFwdTol, m));
          return Exp{e};
        });
    cs.list.back().needs = {{Op::matmul, matmul_key(t)}};

    // A decode seam's shape, and one whose rows of W1 take several steps of a GPU's loads
    // (K1 > 2048), with a partial last group of columns, gelu and no b2 (a GPU's
    // one-dispatch chain takes both with f16 / bf16 weights).
    struct Seam {
      int64_t N1, K1, N2;
      bool gelu, b2;
    };
    for (const Seam s : {Seam{64, 96, 32, false, true}, Seam{1024, 2080, 36, true, false}}) {
      const int64_t N1 = s.N1, K1 = s.K1, N2 = s.N2;
      const bool gelu = s.gelu, has_b2 = s.b2;
      cs.add(
          "matmul_add_layernorm_matmul",
          std::string(dtype_name(t)) + (has_b2 ? ",b1,b2" : ",b1,gelu"),
          "x=1x" + std::to_string(N1) + ",K1=" + std::to_string(K1) + ",N2=" + std::to_string(N2),
          [=](CaseRng& r) {
            Inputs in{F(r, {1, N1}), F(r, {1, K1}), weight(r, {N1, K1}, t),
                      F(r, {N1}),    F(r, {N1}),    weight(r, {N2, N1}, t),
                      F(r, {N1})};
            if (has_b2) in.push_back(F(r, {N2}));
            return in;
          },
          [=](const std::vector<Tensor>& x) {
            const Tensor b2 = has_b2 ? x[7] : Tensor();
            const ResidualProduct p =
                matmul_add_layernorm_matmul(x[0], x[1], x[2], x[6], x[3], x[4], eps, x[5],
                                            {.trans_b = true, .gelu = gelu}, b2, {.trans_b = true});
            return Outputs{host(p.out), host(p.x)};
          },
          [=](const Inputs& x) {
            Vec mag1, mag2;
            Expected ex, eo;
            ex.value = ref::matmul_add(
                W(x[0]), product_rows(x[1].f32, t), W(x[2]), W(x[6]),
                {.m = 1, .k = K1, .n = N1, .trans_b = true, .b_stored_rows = N1}, &mag1);
            for (double m : mag1) ex.tol.push_back(reduction_tol(kFwdTol, m));
            // The kernel rounds its own x_new (f32) before the layernorm: start from that.
            const std::vector<float> x_new(ex.value.begin(), ex.value.end());
            const Vec h = ref::layernorm(ref::widen(x_new), W(x[3]), W(x[4]), N1, eps);
            const Vec no_bias;
            eo.value = ref::matmul(
                product_rows(std::vector<float>(h.begin(), h.end()), t), W(x[5]),
                has_b2 ? W(x[7]) : no_bias,
                {.m = 1, .k = N1, .n = N2, .trans_b = true, .b_stored_rows = N2, .gelu = gelu},
                &mag2);
            for (double m : mag2) eo.tol.push_back(2.4 * reduction_tol(kFwdTol, m));
            return Exp{eo, ex};
          });
      cs.list.back().needs = {{Op::matmul, matmul_key(t)}};
    }
  }
}

}  // namespace

void add_weight_dtypes(Cases& cs) {
  add_weight_matmuls(cs);
  add_weight_embeddings(cs);
  add_weight_fused(cs);
}

}  // namespace forge::test::cases
