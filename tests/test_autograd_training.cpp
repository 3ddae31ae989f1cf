// forge::ag in the training loop: gradients accumulating in Parameters across tapes, the
// grad norm and clipping, a tape released by backward, the tape's error paths, and the
// LM-head loss in blocks of rows against float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd_test_util.h"
#include "forge/autograd.h"
#include "forge/forge.h"

using namespace forge;
using namespace forge::test;

// ---- training-loop behaviour -------------------------------------------------------------

TEST(Autograd, ParameterGradAccumulatesAcrossTapes) {
  ag::Parameter w(randt({4, 3}, 51), "w");
  const Tensor x1 = randt({5, 4}, 52), x2 = randt({5, 4}, 53);
  const Tensor tg = Tensor::from_vector(std::vector<uint32_t>{0, 1, 2, 1, 0}, {5});
  auto step = [&](const Tensor& x) {
    ag::Tape tape;
    tape.backward(ag::cross_entropy(ag::matmul(tape.leaf(x, false), tape.param(w)), tg));
  };
  step(x1);
  const std::vector<double> g1 = to_d(w.grad());
  const void* buffer = w.grad().storage().get();
  w.zero_grad();
  EXPECT_FALSE(w.has_grad());
  EXPECT_FALSE(w.grad().defined());
  step(x2);
  const std::vector<double> g2 = to_d(w.grad());
  EXPECT_EQ(w.grad().storage().get(), buffer) << "zero_grad keeps the buffer for reuse";
  expect_close(w.grad(), g2, 0, "after zero_grad");
  step(x1);  // accumulates: g2 + g1
  std::vector<double> sum(g1.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = g1[i] + g2[i];
  expect_close(w.grad(), sum, 1e-6, "accumulated");
  // A frozen parameter gets nothing.
  ag::Parameter frozen(randt({4, 3}, 54), "frozen", /*requires_grad=*/false);
  ag::Tape tape;
  ag::Var out = ag::matmul(tape.leaf(x1), tape.param(frozen));
  tape.backward(out, randt({5, 3}, 55));
  EXPECT_FALSE(frozen.has_grad());
}

TEST(Autograd, GradNormAndClip) {
  ag::Parameter a(Tensor::zeros({2, 3}), "a"), b(Tensor::zeros({4}), "b"), c(Tensor::zeros({2}));
  const Tensor ga = randt({2, 3}, 61), gb = randt({4}, 62);
  {  // set the gradients exactly: backward of the identity-like scale(x, 1) with a seed
    ag::Tape tape;
    tape.backward(ag::scale(tape.param(a), 1.0f), ga);
    ag::Tape t2;
    t2.backward(ag::scale(t2.param(b), 1.0f), gb);
  }
  const std::vector<ag::Parameter> params{a, b, c};  // c has no gradient: skipped
  double want = 0;
  for (double v : to_d(ga)) want += v * v;
  for (double v : to_d(gb)) want += v * v;
  want = std::sqrt(want);
  EXPECT_NEAR(ag::global_grad_norm(params), want, 1e-6 * want);
  // max_norm above the norm: untouched.
  EXPECT_NEAR(ag::clip_grad_norm(params, want * 2), want, 1e-6 * want);
  expect_close(a.grad(), to_d(ga), 0, "unclipped");
  // max_norm below the norm: scaled down to max_norm.
  const double max_norm = want / 4;
  EXPECT_NEAR(ag::clip_grad_norm(params, max_norm), want, 1e-6 * want);
  EXPECT_NEAR(ag::global_grad_norm(params), max_norm, 1e-5 * max_norm);
  std::vector<double> scaled = to_d(gb);
  for (double& v : scaled) v *= max_norm / (want + 1e-6);
  expect_close(b.grad(), scaled, 1e-6, "clipped");
  expect_error([&] { ag::clip_grad_norm(params, 0.0); }, ErrorKind::Range, "clip_grad_norm");
  expect_error([&] { ag::clip_grad_norm(params, NAN); }, ErrorKind::Range, "clip_grad_norm");
  ag::zero_grad(params);
  EXPECT_EQ(ag::global_grad_norm(params), 0.0);
}

TEST(Autograd, BackwardReleasesTheTape) {
  ag::Tape tape;
  ag::Var x = tape.leaf(randt({3, 4}, 71));
  ag::Var y = ag::gelu(x), z = ag::scale(y, 2.0f);
  ag::Var n = ag::scale(tape.leaf(randt({2}, 72), false), 3.0f);  // nothing requires grad
  EXPECT_FALSE(n.requires_grad());
  EXPECT_EQ(tape.num_records(), 2u) << "ops without differentiable inputs are not recorded";
  tape.backward(z, randt({3, 4}, 73));
  EXPECT_EQ(tape.num_records(), 0u);
  EXPECT_TRUE(tape.backward_done());
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(y.grad().defined());
  EXPECT_FALSE(z.grad().defined());
  EXPECT_EQ(z.value().shape(), Shape({3, 4})) << "values stay readable";
}

// ---- error paths -------------------------------------------------------------------------

TEST(AutogradErrors, TapeMisuse) {
  const Tensor t = randt({2, 2}, 81);
  ag::Tape tape, other;
  ag::Var a = tape.leaf(t), b = other.leaf(t);
  expect_error([&] { ag::add(a, b); }, ErrorKind::Shape, "ag::add");
  expect_error([&] { ag::add(a, ag::Var()); }, ErrorKind::Shape, "ag::add");
  expect_error([&] { ag::Var().value(); }, ErrorKind::Shape, "Var::value");
  expect_error([&] { a.item(); }, ErrorKind::Shape, "Var::item");
  expect_error([&] { tape.backward(b); }, ErrorKind::Shape, "Tape::backward");
  expect_error([&] { tape.backward(ag::Var()); }, ErrorKind::Shape, "Tape::backward");
  // non-scalar without a seed; seed of the wrong shape
  ag::Var s = ag::scale(a, 2.0f);
  expect_error([&] { tape.backward(s); }, ErrorKind::Shape, "Tape::backward");
  expect_error([&] { tape.backward(s, randt({4}, 1)); }, ErrorKind::Shape, "Tape::backward");
  // a root that does not depend on anything requiring grad
  ag::Var c = tape.leaf(t, false);
  expect_error([&] { tape.backward(ag::scale(c, 1.0f), t); }, ErrorKind::Shape, "Tape::backward");
  expect_error([&] { tape.leaf(Tensor::zeros({2}, DType::U32)); }, ErrorKind::DType, "Tape::leaf");
  expect_error([&] { tape.leaf(Tensor()); }, ErrorKind::Shape, "Tape::leaf");
  expect_error([&] { tape.param(ag::Parameter()); }, ErrorKind::Shape, "Tape::param");
  expect_error([&] { ag::Parameter(Tensor::zeros({2}, DType::U32)); }, ErrorKind::DType,
               "Parameter");
  // backward twice, and recording after backward
  tape.backward(s, t);
  expect_error([&] { tape.backward(s, t); }, ErrorKind::Shape, "Tape::backward");
  expect_error([&] { ag::scale(a, 1.0f); }, ErrorKind::Shape, "ag::scale");
  expect_error([&] { tape.leaf(t); }, ErrorKind::Shape, "Tape::leaf");
  // a destroyed tape
  ag::Var orphan;
  {
    ag::Tape gone;
    orphan = gone.leaf(t);
  }
  EXPECT_EQ(orphan.value().numel(), 4);
  expect_error([&] { ag::gelu(orphan); }, ErrorKind::Shape, "ag::gelu");
}

TEST(AutogradErrors, MatmulBRows) {
  ag::Tape tape;
  ag::Var a = tape.leaf(randt({2, 3, 4}, 82)), b = tape.leaf(randt({2, 6, 5}, 83));
  MatmulSpec s;
  s.b_rows = 4;
  expect_error([&] { ag::matmul(a, b, s); }, ErrorKind::Unsupported, "ag::matmul");
  ag::Var bc = tape.leaf(randt({2, 6, 5}, 83), false);
  ag::Var at = tape.leaf(randt({2, 4, 3}, 84));
  s.trans_a = true;
  expect_error([&] { ag::matmul(at, bc, s); }, ErrorKind::Unsupported, "ag::matmul");
  // Errors of the underlying op pass through with its name.
  expect_error([&] { ag::matmul(a, tape.leaf(randt({5, 5}, 85))); }, ErrorKind::Shape, "matmul");
}

TEST(AutogradErrors, OpErrorsPassThrough) {
  ag::Tape tape;
  ag::Var l = tape.leaf(randt({3, 4}, 86));
  expect_error(
      [&] {
        ag::cross_entropy(l, Tensor::from_vector(std::vector<uint32_t>{0, 4, 1}, {3}));
      },
      ErrorKind::Range, "gather_nll");
  expect_error(
      [&] {
        ag::cross_entropy(tape.leaf(Tensor::zeros({0, 4})), Tensor::zeros({0}, DType::U32));
      },
      ErrorKind::Shape, "ag::cross_entropy");
  expect_error([&] { ag::reshape(l, {5}); }, ErrorKind::Shape, "reshape");
}

namespace {

// lm_head_loss in blocks of rows equals the float64 mean cross-entropy of h @ W^T, and its
// gradients (dh = dlogits W, dW = dlogits^T h with dlogits = (softmax - onehot) / N), for
// whatever the block size, on every device.
TEST(Autograd, LmHeadLossInRowBlocksMatchesFloat64) {
  const int64_t N = 7, C = 5, V = 11;
  const Tensor ht = randt({N, C}, 31), wt = randt({V, C}, 32);
  const std::vector<uint32_t> tg = {0, 10, 5, 6, 3, 9, 0};
  const std::vector<double> h = to_d(ht);
  const std::vector<double> w = to_d(wt);
  // float64 reference
  double loss = 0;
  std::vector<double> dh(N * C, 0.0), dw(V * C, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    std::vector<double> z(V);
    double mx = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t k = 0; k < C; ++k) z[v] += h[i * C + k] * w[v * C + k];
      mx = std::max(mx, z[v]);
    }
    double se = 0;
    for (double x : z) se += std::exp(x - mx);
    loss += mx + std::log(se) - z[tg[i]];
    for (int64_t v = 0; v < V; ++v) {
      const double d = (std::exp(z[v] - mx) / se - (v == tg[i] ? 1.0 : 0.0)) / N;
      for (int64_t k = 0; k < C; ++k) {
        dh[i * C + k] += d * w[v * C + k];
        dw[v * C + k] += d * h[i * C + k];
      }
    }
  }
  loss /= N;
  for (const DeviceInfo& info : list_devices()) {
    const Device dev = info.device;
    for (int64_t block : {1, 3, 7, 100}) {
      const std::string what = dev.str() + ", blocks of " + std::to_string(block) + " rows";
      ag::Tape tape;
      ag::Var hv = tape.leaf(ht.to(dev)), wv = tape.leaf(wt.to(dev));
      // Targets on the host: the ops upload them (see ops.h).
      const ag::Var l = ag::lm_head_loss(hv, wv, Tensor::from_vector(tg, {N}), block);
      expect_close(l.value(), {loss}, 1e-5, what + ": loss");
      tape.backward(l, Tensor::full({1}, 1.0f, dev));
      expect_close(hv.grad(), dh, 1e-5, what + ": dh");
      expect_close(wv.grad(), dw, 1e-5, what + ": dW");
    }
  }
  ag::Tape tape;
  const ag::Var hv = tape.leaf(ht), w0 = tape.leaf(wt);
  expect_error([&] { ag::lm_head_loss(hv, w0, Tensor::from_vector(tg, {N}), 0); }, ErrorKind::Range,
               "ag::lm_head_loss: block_rows must be >= 1");
  expect_error(
      [&] {
        ag::lm_head_loss(hv, w0, Tensor::from_vector(tg, {7, 1}).narrow_rows(0, 3), 2);
      },
      ErrorKind::Shape, "ag::lm_head_loss: targets");
}

}  // namespace
