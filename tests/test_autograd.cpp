// forge::ag: every backward rule against a float64 reference computed here by hand, a
// finite-difference check of a small composition (with tied weights), the tape's error
// paths and gradient accumulation, the grad-norm utilities and the LM-head loss:
// test_autograd_training.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "autograd_test_util.h"
#include "forge/autograd.h"
#include "forge/forge.h"

using namespace forge;
using namespace forge::test;

namespace {

// ---- float64 matmul reference over stored layouts ----------------------------------------

struct MatmulRef {
  std::vector<double> out, da, db, dbias;
};

/// out = alpha * op(a) @ op(b) + bias and the gradients of <g, out>, by index loops over the
/// stored layouts (a rank-2 operand shared by all batches accumulates over them).
MatmulRef matmul_ref(const Tensor& at, const Tensor& bt, const MatmulSpec& s, bool has_bias,
                     const Tensor& biast, const Tensor& gt) {
  const std::vector<double> a = to_d(at), b = to_d(bt), g = to_d(gt);
  const std::vector<double> bias = has_bias ? to_d(biast) : std::vector<double>();
  const Shape& sa = at.shape();
  const Shape& sb = bt.shape();
  const int64_t batch = sa.rank() == 3 ? sa[0] : (sb.rank() == 3 ? sb[0] : 1);
  const int64_t M = s.trans_a ? sa.dim(-1) : sa.dim(-2);
  const int64_t K = s.trans_a ? sa.dim(-2) : sa.dim(-1);
  const int64_t Rs = sb.dim(-2), Cs = sb.dim(-1);
  const int64_t br = s.b_rows > 0 ? s.b_rows : Rs;
  const int64_t N = s.trans_b ? br : Cs;
  auto ia = [&](int64_t t, int64_t m, int64_t k) {
    return (sa.rank() == 3 ? t * sa[1] * sa[2] : 0) + (s.trans_a ? k * M + m : m * K + k);
  };
  auto ib = [&](int64_t t, int64_t k, int64_t n) {
    return (sb.rank() == 3 ? t * Rs * Cs : 0) + (s.trans_b ? n * Cs + k : k * Cs + n);
  };
  MatmulRef r;
  r.out.assign(static_cast<size_t>(batch * M * N), 0.0);
  r.da.assign(a.size(), 0.0);
  r.db.assign(b.size(), 0.0);
  r.dbias.assign(static_cast<size_t>(N), 0.0);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const size_t o = static_cast<size_t>((t * M + m) * N + n);
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          acc += a[ia(t, m, k)] * b[ib(t, k, n)];
          r.da[ia(t, m, k)] += s.alpha * g[o] * b[ib(t, k, n)];
          r.db[ib(t, k, n)] += s.alpha * g[o] * a[ia(t, m, k)];
        }
        r.out[o] = s.alpha * acc + (has_bias ? bias[n] : 0.0);
        r.dbias[n] += g[o];
      }
  return r;
}

}  // namespace

// ---- exact rules -------------------------------------------------------------------------

TEST(Autograd, MatmulAllFlagsRanksAndBias) {
  const int64_t B = 2, M = 3, K = 4, N = 5;
  uint32_t seed = 1;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int ranks = 0; ranks < 4; ++ranks)  // (a, b) ranks: 22, 32, 23, 33
        for (int with_bias = 0; with_bias < 2; ++with_bias) {
          const bool a3 = ranks & 1, b3 = ranks & 2;
          SCOPED_TRACE("ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " a3 " +
                       std::to_string(a3) + " b3 " + std::to_string(b3) + " bias " +
                       std::to_string(with_bias));
          std::vector<int64_t> da = ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K};
          std::vector<int64_t> db = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
          if (a3) da.insert(da.begin(), B);
          if (b3) db.insert(db.begin(), B);
          MatmulSpec spec;
          spec.trans_a = ta;
          spec.trans_b = tb;
          spec.alpha = 0.7f;
          const Tensor at = randt(Shape(da), seed++), bt = randt(Shape(db), seed++);
          const Tensor biast = randt({N}, seed++);
          const Shape out_shape = (a3 || b3) ? Shape{B, M, N} : Shape{M, N};
          const Tensor gt = randt(out_shape, seed++);

          ag::Tape tape;
          ag::Var a = tape.leaf(at), b = tape.leaf(bt), bias = tape.leaf(biast);
          ag::Var out = ag::matmul(a, b, spec, with_bias ? bias : ag::Var());
          ASSERT_EQ(out.shape(), out_shape);
          tape.backward(out, gt);
          const MatmulRef r = matmul_ref(at, bt, spec, with_bias, biast, gt);
          expect_close(out.value(), r.out, 1e-5, "out");
          expect_close(a.grad(), r.da, 1e-5, "da");
          expect_close(b.grad(), r.db, 1e-5, "db");
          if (with_bias)
            expect_close(bias.grad(), r.dbias, 1e-5, "dbias");
          else
            EXPECT_FALSE(bias.grad().defined());
        }
}

TEST(Autograd, MatmulBRowsGradientOfA) {
  // The KV-cache read: b has 6 stored rows, only the first 4 are used. a gets a gradient; b
  // must not require one.
  for (int tb = 0; tb < 2; ++tb)
    for (int ta = 0; ta < 2; ++ta)
      for (int b3 = 0; b3 < 2; ++b3) {
        if (ta && b3) continue;  // rejected, see AutogradErrors.MatmulBRows
        SCOPED_TRACE("tb " + std::to_string(tb) + " ta " + std::to_string(ta) + " b3 " +
                     std::to_string(b3));
        const int64_t B = 2, M = 3, used = 4, stored = 6, W = 5;
        MatmulSpec spec;
        spec.trans_a = ta;
        spec.trans_b = tb;
        spec.b_rows = used;
        spec.alpha = 1.3f;
        // tb: b [stored, K=W] -> N = used, K = W; !tb: b [stored, N=W] -> K = used.
        const int64_t K = tb ? W : used;
        const int64_t N = tb ? used : W;
        std::vector<int64_t> sb{stored, W};
        if (b3) sb.insert(sb.begin(), B);
        const Shape sa = ta ? Shape{B, K, M} : Shape{B, M, K};
        const Tensor at = randt(sa, 10 + tb + 2 * ta + 4 * b3);
        const Tensor bt = randt(Shape(sb), 20 + tb);
        const Tensor gt = randt({B, M, N}, 30 + tb);
        ag::Tape tape;
        ag::Var a = tape.leaf(at), b = tape.leaf(bt, /*requires_grad=*/false);
        ag::Var out = ag::matmul(a, b, spec);
        tape.backward(out, gt);
        const MatmulRef r = matmul_ref(at, bt, spec, false, Tensor(), gt);
        expect_close(out.value(), r.out, 1e-5, "out");
        expect_close(a.grad(), r.da, 1e-5, "da");
        EXPECT_FALSE(b.grad().defined());
      }
}

TEST(Autograd, AddBroadcastScaleReshape) {
  const Tensor at = randt({2, 3, 4}, 1), bt = randt({4}, 2), ct = randt({2, 3, 4}, 3);
  const Tensor gt = randt({6, 4}, 4);
  ag::Tape tape;
  ag::Var a = tape.leaf(at), b = tape.leaf(bt), c = tape.leaf(ct);
  // out = reshape(2.5 * (a + b) + c, [6, 4])
  ag::Var out = ag::reshape(ag::add(ag::scale(ag::add(a, b), 2.5f), c), {6, 4});
  tape.backward(out, gt);
  const std::vector<double> g = to_d(gt);
  std::vector<double> da(g.size()), db(4, 0.0);
  for (size_t i = 0; i < g.size(); ++i) {
    da[i] = 2.5 * g[i];
    db[i % 4] += 2.5 * g[i];
  }
  expect_close(a.grad(), da, 1e-6, "da");
  expect_close(b.grad(), db, 1e-6, "db");
  expect_close(c.grad(), g, 0, "dc");
  EXPECT_EQ(a.grad().shape(), Shape({2, 3, 4}));
}

TEST(Autograd, ReusedVarAccumulatesWithoutCorruptingShared) {
  // add(y, y) hands one dy to both of its inputs; y's gradient must become 2 dy without
  // writing into the shared tensor (the seed), and x (a leaf) gets its own copy.
  const Tensor xt = randt({3, 5}, 5), seed = randt({3, 5}, 6);
  const std::vector<double> seed_before = to_d(seed);
  ag::Tape tape;
  ag::Var x = tape.leaf(xt);
  ag::Var y = ag::scale(x, 1.0f);
  y.retain_grad();
  ag::Var z = ag::add(y, y);
  ag::Var w = ag::add(z, x);  // x used twice: directly and through y
  tape.backward(w, seed);
  std::vector<double> want2(seed_before.size()), want3(seed_before.size());
  for (size_t i = 0; i < want2.size(); ++i) {
    want2[i] = 2 * seed_before[i];
    want3[i] = 3 * seed_before[i];
  }
  expect_close(seed, seed_before, 0, "seed untouched");
  expect_close(y.grad(), want2, 1e-6, "dy");
  expect_close(x.grad(), want3, 1e-6, "dx");
  EXPECT_NE(x.grad().storage(), seed.storage());
  EXPECT_FALSE(z.grad().defined()) << "intermediate gradients are freed";
}

TEST(Autograd, GeluSoftmaxDropout) {
  const Tensor xt = randt({2, 4, 6}, 7, 1.5f), gt = randt({2, 4, 6}, 8);
  const std::vector<double> x = to_d(xt), g = to_d(gt);
  // gelu
  {
    ag::Tape tape;
    ag::Var v = tape.leaf(xt);
    tape.backward(ag::gelu(v), gt);
    std::vector<double> want(x.size());
    const double c = std::sqrt(2.0 / M_PI);
    for (size_t i = 0; i < x.size(); ++i) {
      const double u = c * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
      const double th = std::tanh(u);
      want[i] = g[i] * (0.5 * (1 + th) +
                        0.5 * x[i] * (1 - th * th) * c * (1 + 3 * 0.044715 * x[i] * x[i]));
    }
    expect_close(v.grad(), want, 1e-5, "gelu");
  }
  // softmax: plain, causal, causal with offset ([.., T=4, S=6])
  for (auto [causal, offset] : {std::pair{false, 0}, std::pair{true, 0}, std::pair{true, 2}}) {
    SCOPED_TRACE("causal " + std::to_string(causal) + " offset " + std::to_string(offset));
    ag::Tape tape;
    ag::Var v = tape.leaf(xt);
    ag::Var y = ag::softmax(v, causal, offset);
    tape.backward(y, gt);
    std::vector<double> want(x.size(), 0.0);
    for (int64_t r = 0; r < 8; ++r) {
      const int64_t i = r % 4;
      const int64_t seen = causal ? std::min<int64_t>(6, i + offset + 1) : 6;
      double mx = -1e300, sum = 0, dot = 0;
      for (int64_t j = 0; j < seen; ++j) mx = std::max(mx, x[r * 6 + j]);
      std::vector<double> p(6, 0.0);
      for (int64_t j = 0; j < seen; ++j) sum += p[j] = std::exp(x[r * 6 + j] - mx);
      for (int64_t j = 0; j < seen; ++j) dot += (p[j] /= sum) * g[r * 6 + j];
      for (int64_t j = 0; j < 6; ++j) want[r * 6 + j] = p[j] * (g[r * 6 + j] - dot);
    }
    expect_close(v.grad(), want, 1e-5, "softmax");
  }
  // dropout: backward = the same mask and scale applied to dy
  {
    const float p = 0.3f;
    const uint64_t s = 0x1234567890abcdefULL;
    ag::Tape tape;
    ag::Var v = tape.leaf(xt);
    ag::Var y = ag::dropout(v, p, s);
    tape.backward(y, gt);
    std::vector<double> want(x.size()), want_y(x.size());
    int kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const bool keep = (dropout_hash(s, i) >> 8) >= dropout_threshold(p);
      kept += keep;
      want[i] = keep ? g[i] * (1.0f / (1.0f - p)) : 0.0;
      want_y[i] = keep ? x[i] * (1.0f / (1.0f - p)) : 0.0;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, static_cast<int>(x.size()));
    expect_close(y.value(), want_y, 1e-6, "dropout forward");
    expect_close(v.grad(), want, 1e-6, "dropout");
    // p = 0 is the identity and records nothing.
    ag::Tape t2;
    ag::Var u = t2.leaf(xt);
    EXPECT_EQ(ag::dropout(u, 0.0f, s).value().storage(), xt.storage());
    EXPECT_EQ(t2.num_records(), 0u);
  }
}

TEST(Autograd, LayerNorm) {
  const int64_t R = 6, C = 7;
  const Tensor xt = randt({2, 3, C}, 9, 2.0f, 0.5f), gt = randt({2, 3, C}, 10);
  const Tensor gam = randt({C}, 11, 0.3f, 1.0f), bet = randt({C}, 12);
  const float eps = 1e-5f;
  ag::Tape tape;
  ag::Var x = tape.leaf(xt), gamma = tape.leaf(gam), beta = tape.leaf(bet);
  tape.backward(ag::layernorm(x, gamma, beta, eps), gt);
  const std::vector<double> xv = to_d(xt), g = to_d(gt), w = to_d(gam);
  std::vector<double> dx(xv.size()), dw(C, 0.0), db(C, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const double* xr = &xv[r * C];
    const double* gr = &g[r * C];
    double mean = 0, var = 0;
    for (int64_t j = 0; j < C; ++j) mean += xr[j] / C;
    for (int64_t j = 0; j < C; ++j) var += (xr[j] - mean) * (xr[j] - mean) / C;
    const double rstd = 1 / std::sqrt(var + eps);
    double m1 = 0, m2 = 0;  // mean(dxhat), mean(dxhat * xhat)
    for (int64_t j = 0; j < C; ++j) {
      const double xhat = (xr[j] - mean) * rstd;
      m1 += gr[j] * w[j] / C;
      m2 += gr[j] * w[j] * xhat / C;
      dw[j] += gr[j] * xhat;
      db[j] += gr[j];
    }
    for (int64_t j = 0; j < C; ++j) {
      const double xhat = (xr[j] - mean) * rstd;
      dx[r * C + j] = rstd * (gr[j] * w[j] - m1 - xhat * m2);
    }
  }
  expect_close(x.grad(), dx, 1e-4, "dx");
  expect_close(gamma.grad(), dw, 1e-5, "dgamma");
  expect_close(beta.grad(), db, 1e-5, "dbeta");
}

TEST(Autograd, EmbeddingAccumulatesRepeatedIds) {
  const int64_t V = 5, C = 3;
  const Tensor table = randt({V, C}, 13);
  const Tensor ids = Tensor::from_vector(std::vector<uint32_t>{4, 1, 4, 0, 4, 2}, {2, 3});
  const Tensor gt = randt({2, 3, C}, 14);
  const std::vector<double> g = to_d(gt);
  std::vector<double> want(V * C, 0.0);
  const std::vector<uint32_t> idv = ids.to_vector<uint32_t>();
  for (size_t i = 0; i < idv.size(); ++i)
    for (int64_t c = 0; c < C; ++c) want[idv[i] * C + c] += g[i * C + c];
  {
    ag::Tape tape;
    ag::Var t = tape.leaf(table);
    tape.backward(ag::embedding(ids, t), gt);
    expect_close(t.grad(), want, 1e-6, "dtable");
  }
}

TEST(Autograd, TransbHead) {
  // out = alpha * a @ W^T (the LM head's form) with a batched a [2, 3, 4] and W [7, 4].
  const Tensor at = randt({2, 3, 4}, 15), wt = randt({7, 4}, 16), gt = randt({2, 3, 7}, 17);
  MatmulSpec spec;
  spec.trans_b = true;
  spec.alpha = 0.5f;
  const MatmulRef r = matmul_ref(at.reshape({6, 4}), wt, spec, false, Tensor(), gt.reshape({6, 7}));
  ag::Tape tape;
  ag::Var a = tape.leaf(at), w = tape.leaf(wt);
  ag::Var out = ag::matmul(a, w, spec);
  tape.backward(out, gt);
  expect_close(out.value(), r.out, 1e-5, "out");
  expect_close(a.grad(), r.da, 1e-5, "da");
  const std::vector<double> dw = to_d(w.grad());
  ASSERT_EQ(dw.size(), r.db.size());
  for (size_t i = 0; i < dw.size(); ++i)
    EXPECT_NEAR(dw[i], r.db[i], 1e-5 * (1 + std::abs(r.db[i])));
}

TEST(Autograd, HeadsLayoutGradients) {
  // split_heads / split_qkv / merge_heads only move elements, so their gradients move the
  // seed back: checked against the index map written out here.
  const int64_t B = 2, T = 3, H = 2, hd = 4, C = H * hd;
  const Tensor qkv_t = randt({B, T, 3 * C}, 18);
  std::vector<Tensor> seeds;
  for (int p = 0; p < 3; ++p) seeds.push_back(randt({B * H, T, hd}, 19 + p));
  auto src_index = [&](int part, int64_t g, int64_t t, int64_t d) {
    const int64_t b = g / H, h = g % H;
    return (b * T + t) * 3 * C + part * C + h * hd + d;
  };
  for (int joint = 0; joint < 2; ++joint) {
    ag::Tape tape;
    ag::Var qkv = tape.leaf(qkv_t);
    std::array<ag::Var, 3> parts;
    if (joint)
      parts = ag::split_qkv(qkv, H);
    else
      for (int p = 0; p < 3; ++p) parts[p] = ag::split_heads(qkv, H, p);
    // loss-like root: sum_p <seed_p, part_p> via an explicit seed on a merged sum
    ag::Var sum = ag::add(ag::add(ag::merge_heads(parts[0], H), ag::merge_heads(parts[1], H)),
                          ag::merge_heads(parts[2], H));  // [B, T, C]
    // The seed for sum is merge_heads(s); then each part's gradient is s itself.
    const Tensor s = seeds[0];
    tape.backward(sum, merge_heads(s, H));
    std::vector<double> want(static_cast<size_t>(qkv_t.numel()), 0.0);
    const std::vector<double> sv = to_d(s);
    for (int p = 0; p < 3; ++p)
      for (int64_t g = 0; g < B * H; ++g)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < hd; ++d) want[src_index(p, g, t, d)] = sv[(g * T + t) * hd + d];
    expect_close(qkv.grad(), want, 0, joint ? "split_qkv" : "split_heads");
  }
  {  // only q used from split_qkv: k and v get zero gradients
    ag::Tape tape;
    ag::Var qkv = tape.leaf(qkv_t);
    auto [q, k, v] = ag::split_qkv(qkv, H);
    tape.backward(q, seeds[1]);
    std::vector<double> want(static_cast<size_t>(qkv_t.numel()), 0.0);
    const std::vector<double> sv = to_d(seeds[1]);
    for (int64_t g = 0; g < B * H; ++g)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hd; ++d) want[src_index(0, g, t, d)] = sv[(g * T + t) * hd + d];
    expect_close(qkv.grad(), want, 0, "q only");
  }
}

TEST(Autograd, CrossEntropy) {
  const int64_t N = 5, V = 7;
  const Tensor lt = randt({N, V}, 23, 2.0f);
  const Tensor targets = Tensor::from_vector(std::vector<uint32_t>{0, 6, 3, 3, 1}, {N});
  ag::Tape tape;
  ag::Var logits = tape.leaf(lt);
  ag::Var loss = ag::scale(ag::cross_entropy(logits, targets), 3.0f);  // dloss = 3 for CE
  const std::vector<double> l = to_d(lt);
  const std::vector<uint32_t> tg = targets.to_vector<uint32_t>();
  double want_loss = 0;
  std::vector<double> want(l.size());
  for (int64_t i = 0; i < N; ++i) {
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, l[i * V + j]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(l[i * V + j] - mx);
    want_loss += (std::log(sum) + mx - l[i * V + tg[i]]) / N;
    for (int64_t j = 0; j < V; ++j)
      want[i * V + j] = 3.0 * (std::exp(l[i * V + j] - mx) / sum - (j == tg[i])) / N;
  }
  ASSERT_EQ(loss.shape(), Shape({1}));
  EXPECT_NEAR(loss.value().to_vector<float>()[0], 3 * want_loss, 1e-5 * 3 * want_loss);
  tape.backward(loss);
  expect_close(logits.grad(), want, 1e-5, "dlogits");
}

// ---- finite differences through a composition with tied weights --------------------------

namespace {

constexpr int64_t kV = 11, kC = 8, kB = 2, kT = 5, kHeads = 2;

struct TinyModel {
  ag::Parameter wte, w1, b1, w2, ln_w, ln_b, wqkv, bqkv;
  std::vector<ag::Parameter> all() const { return {wte, w1, b1, w2, ln_w, ln_b, wqkv, bqkv}; }
};

TinyModel tiny_model() {
  TinyModel m;
  m.wte = ag::Parameter(randt({kV, kC}, 31, 0.5f), "wte");
  m.w1 = ag::Parameter(randt({kC, 2 * kC}, 32, 0.4f), "w1");
  m.b1 = ag::Parameter(randt({2 * kC}, 33, 0.2f), "b1");
  m.w2 = ag::Parameter(randt({2 * kC, kC}, 34, 0.4f), "w2");
  m.ln_w = ag::Parameter(randt({kC}, 35, 0.2f, 1.0f), "ln_w");
  m.ln_b = ag::Parameter(randt({kC}, 36, 0.2f), "ln_b");
  m.wqkv = ag::Parameter(randt({kC, 3 * kC}, 37, 0.5f), "wqkv");
  m.bqkv = ag::Parameter(randt({3 * kC}, 38, 0.2f), "bqkv");
  return m;
}

/// embedding -> matmul+bias -> gelu -> matmul -> residual -> layernorm -> qkv -> causal
/// softmax attention -> dropout -> residual -> tied LM head -> cross-entropy. The LM head
/// reuses wte (tied: two uses of one Var).
ag::Var tiny_loss(ag::Tape& tape, const TinyModel& m, const Tensor& ids, const Tensor& tgt) {
  ag::Var wte = tape.param(m.wte);
  ag::Var x = ag::embedding(ids, wte);  // [B, T, C]
  ag::Var h = ag::gelu(ag::matmul(x, tape.param(m.w1), {}, tape.param(m.b1)));
  x = ag::add(x, ag::matmul(h, tape.param(m.w2)));
  x = ag::layernorm(x, tape.param(m.ln_w), tape.param(m.ln_b));
  ag::Var qkv = ag::matmul(x, tape.param(m.wqkv), {}, tape.param(m.bqkv));
  auto [q, k, v] = ag::split_qkv(qkv, kHeads);
  MatmulSpec qk;
  qk.trans_b = true;
  qk.alpha = 0.5f;
  ag::Var att = ag::softmax(ag::matmul(q, k, qk), true);
  ag::Var y = ag::dropout(ag::merge_heads(ag::matmul(att, v), kHeads), 0.25f, 77);
  x = ag::add(x, y);
  ag::Var logits = ag::matmul(x, wte, [] {
    MatmulSpec s;
    s.trans_b = true;
    return s;
  }());
  return ag::cross_entropy(logits, tgt);
}

}  // namespace

TEST(Autograd, FiniteDifferencesTinyModel) {
  const TinyModel m = tiny_model();
  std::mt19937 rng(5);
  std::vector<uint32_t> ids(kB * kT), tg(kB * kT);
  for (auto& i : ids) i = rng() % kV;
  for (auto& t : tg) t = rng() % kV;
  ids[3] = ids[7];
  const Tensor ids_t = Tensor::from_vector(ids, {kB, kT});
  const Tensor tg_t = Tensor::from_vector(tg, {kB, kT});

  ag::Tape tape;
  ag::Var loss = tiny_loss(tape, m, ids_t, tg_t);
  tape.backward(loss);

  auto eval = [&] {
    ag::Tape t;
    return static_cast<double>(tiny_loss(t, m, ids_t, tg_t).item());
  };
  const float h = 1e-2f;
  for (const ag::Parameter& p : m.all()) {
    SCOPED_TRACE(p.name());
    ASSERT_TRUE(p.has_grad());
    const std::vector<float> an = p.grad().to_vector<float>();
    float* w = p.value().data<float>();
    double max_an = 0;
    for (float g : an) max_an = std::max(max_an, static_cast<double>(std::abs(g)));
    ASSERT_GT(max_an, 1e-3);
    int checked = 0;
    for (size_t i = 0; i < an.size(); ++i) {
      const float w0 = w[i];
      w[i] = w0 + h;
      const double lp = eval();
      w[i] = w0 - h;
      const double lm = eval();
      w[i] = w0;
      const double fd = (lp - lm) / (2.0 * h);
      // Every entry within 1e-2 of the largest gradient; the largest entries (where f32
      // rounding of the loss is negligible next to the gradient) within 1e-2 relative.
      EXPECT_NEAR(an[i], fd, 1e-2 * max_an) << "element " << i;
      if (std::abs(an[i]) >= 0.2 * max_an) {
        ++checked;
        EXPECT_LE(std::abs(an[i] - fd) / std::abs(an[i]), 1e-2) << "element " << i;
      }
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(Autograd, TiedWeightGetsBothContributions) {
  // wte used by the embedding and the LM head: its gradient is the sum of the gradients of
  // two untied copies.
  const Tensor wte_t = randt({kV, kC}, 41, 0.5f);
  const Tensor ids = Tensor::from_vector(std::vector<uint32_t>{1, 2, 3, 1, 9, 10}, {6});
  const Tensor tg = Tensor::from_vector(std::vector<uint32_t>{2, 3, 1, 9, 10, 0}, {6});
  MatmulSpec tb;
  tb.trans_b = true;
  ag::Parameter tied(wte_t.clone(), "tied"), emb(wte_t.clone(), "emb"), head(wte_t.clone(), "head");
  {
    ag::Tape tape;
    ag::Var w = tape.param(tied);
    tape.backward(ag::cross_entropy(ag::matmul(ag::embedding(ids, w), w, tb), tg));
  }
  {
    ag::Tape tape;
    tape.backward(ag::cross_entropy(
        ag::matmul(ag::embedding(ids, tape.param(emb)), tape.param(head), tb), tg));
  }
  std::vector<double> want = to_d(emb.grad());
  const std::vector<double> hw = to_d(head.grad());
  for (size_t i = 0; i < want.size(); ++i) want[i] += hw[i];
  expect_close(tied.grad(), want, 1e-6, "tied");
}

TEST(Autograd, GradReadyFiresOnceWhenEachGradientIsComplete) {
  // A tied weight (read by the first and the last op), a weight read once and a frozen one:
  // the hook sees each trained parameter once, holding its final gradient, and in the order
  // the reverse walk completes them (the head's bias first, the tied weight last).
  const Tensor ids = Tensor::from_vector(std::vector<uint32_t>{1, 2, 3, 1, 9, 10}, {6});
  const Tensor tg = Tensor::from_vector(std::vector<uint32_t>{2, 3, 1, 9, 10, 0}, {6});
  MatmulSpec tb;
  tb.trans_b = true;
  ag::Parameter tied(randt({kV, kC}, 41, 0.5f), "tied");
  ag::Parameter w(randt({kC, kC}, 42, 0.5f), "w");
  ag::Parameter bias(randt({kV}, 43, 0.5f), "bias");
  ag::Parameter frozen(randt({kC}, 44, 0.5f), "frozen", /*requires_grad=*/false);
  std::vector<std::string> order;
  std::vector<std::vector<float>> at_ready;
  {
    ag::Tape tape;
    const ag::Var t = tape.param(tied);
    const ag::Var h = ag::add(ag::matmul(ag::embedding(ids, t), tape.param(w)), tape.param(frozen));
    const ag::Var logits = ag::add(ag::matmul(h, t, tb), tape.param(bias));
    tape.backward(ag::cross_entropy(logits, tg), 1.0f, [&](const ag::Parameter& p) {
      order.push_back(p.name());
      at_ready.push_back(p.grad().to_vector<float>());
    });
  }
  ASSERT_EQ(order, (std::vector<std::string>{"bias", "w", "tied"}));
  EXPECT_EQ(at_ready[0], bias.grad().to_vector<float>());
  EXPECT_EQ(at_ready[1], w.grad().to_vector<float>());
  EXPECT_EQ(at_ready[2], tied.grad().to_vector<float>());
  EXPECT_FALSE(frozen.has_grad());
}
