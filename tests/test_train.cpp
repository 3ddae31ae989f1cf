// GPT-2 training (include/forge/train.h): gradients of the training forward vs HF
// transformers' float64 gradients (golden files), AdamW param groups vs torch.optim.AdamW,
// 30 training steps vs a plain-PyTorch float64 trainer, dropout masks vs an independent
// forward, the schedule, validation and NaN skipping. The training state:
// test_train_state.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "forge/safetensors.h"
#include "forge/train.h"
#include "pyref.h"
#include "train_test_util.h"

namespace forge::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// Golden gradients (tools/make_golden.py --grads, HF transformers in float64)
// ---------------------------------------------------------------------------------------

class TrainGoldenGrads : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainGoldenGrads, MatchHfFloat64) {
  const std::string dir = golden_dir(GetParam());
  const json golden = read_json(dir + "/golden.json");
  gpt2::Model model = gpt2::Model::load(dir);
  const auto ids = golden["ids"].get<std::vector<std::vector<uint32_t>>>();
  const int64_t B = static_cast<int64_t>(ids.size());
  const int64_t T = static_cast<int64_t>(ids[0].size()) - 1;
  std::vector<uint32_t> in, tg;
  for (const auto& row : ids) {
    in.insert(in.end(), row.begin(), row.end() - 1);
    tg.insert(tg.end(), row.begin() + 1, row.end());
  }
  const std::vector<ag::Parameter> params = train::parameters(model);
  EXPECT_EQ(params[0].name(), "wte.weight");
  ag::Tape tape;
  const ag::Var loss = train::loss_forward(tape, model, params, Tensor::from_vector(in, {B, T}),
                                           Tensor::from_vector(tg, {B, T}), 0.0f, 0);
  const double want_loss = golden["loss"].get<double>();
  EXPECT_LE(std::abs(loss.item() - want_loss) / want_loss, 1e-5)
      << loss.item() << " vs " << want_loss;
  tape.backward(loss);

  const SafeTensorsFile grads = SafeTensorsFile::open(dir + "/grads.safetensors");
  std::map<std::string, std::vector<float>> got;
  for (const ag::Parameter& p : params) {
    ASSERT_TRUE(p.has_grad()) << p.name();
    got[p.name()] = values(p.grad());
  }
  EXPECT_EQ(got.size(), grads.names().size());
  for (const std::string& name : grads.names()) {
    ASSERT_TRUE(got.count(name)) << "forge has no parameter " << name;
    const auto want = values(grads.load(name));
    ASSERT_EQ(got[name].size(), want.size()) << name;
    EXPECT_LE(rel_err(got[name], want), 1e-4) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(TrainGolden, TrainGoldenGrads,
                         ::testing::Values("train_grads", "train_grads_untied"),
                         [](const auto& info) { return std::string(info.param); });

// ---------------------------------------------------------------------------------------
// Schedule and validation
// ---------------------------------------------------------------------------------------

TEST(TrainHyper, LearningRateSchedule) {
  train::Hyper h;
  h.lr = 6e-4;
  h.warmup = 10;
  h.steps = 110;
  h.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(train::learning_rate(h, 0), 6e-5);   // (0 + 1) / 10 of the peak
  EXPECT_DOUBLE_EQ(train::learning_rate(h, 4), 3e-4);   // half way up
  EXPECT_DOUBLE_EQ(train::learning_rate(h, 9), 6e-4);   // the peak, last warmup step
  EXPECT_DOUBLE_EQ(train::learning_rate(h, 10), 6e-4);  // cosine starts at the peak
  // Half way through the decay: the mean of peak and floor.
  EXPECT_NEAR(train::learning_rate(h, 60), 0.5 * (6e-4 + 6e-5), 1e-15);
  // A quarter: floor + (1 + cos(pi/4)) / 2 (peak - floor).
  EXPECT_NEAR(train::learning_rate(h, 35), 6e-5 + 0.5 * (1 + std::sqrt(0.5)) * 5.4e-4, 1e-15);
  EXPECT_NEAR(train::learning_rate(h, 110), 6e-5, 1e-18);  // the end: 10 %
  EXPECT_NEAR(train::learning_rate(h, 500), 6e-5, 1e-18);  // constant afterwards
  h.warmup = 0;
  EXPECT_DOUBLE_EQ(train::learning_rate(h, 0), 6e-4);
  EXPECT_THROW(train::learning_rate(h, -1), Error);
}

TEST(TrainHyper, ValidateNamesTheOption) {
  auto expect_bad = [](auto edit, const char* option) {
    train::Hyper h;
    edit(h);
    try {
      h.validate();
      ADD_FAILURE() << "no error for " << option;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Range);
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("train::Hyper:", 0), 0u) << e.what();
    }
  };
  expect_bad([](train::Hyper& h) { h.lr = 0; }, "--lr");
  expect_bad([](train::Hyper& h) { h.lr = std::nan(""); }, "--lr");
  expect_bad([](train::Hyper& h) { h.steps = 0; }, "--steps");
  expect_bad([](train::Hyper& h) { h.batch = 0; }, "--batch");
  expect_bad([](train::Hyper& h) { h.micro_batch = 3; }, "--micro-batch");  // 3 does not divide 8
  expect_bad([](train::Hyper& h) { h.micro_batch = -1; }, "--micro-batch");
  expect_bad([](train::Hyper& h) { h.seq = -1; }, "--seq");
  expect_bad([](train::Hyper& h) { h.warmup = -1; }, "--warmup");
  expect_bad([](train::Hyper& h) { h.clip = -1; }, "--clip");
  expect_bad([](train::Hyper& h) { h.dropout = 1.0f; }, "--dropout");
  expect_bad([](train::Hyper& h) { h.weight_decay = -0.1f; }, "--weight-decay");
  expect_bad([](train::Hyper& h) { h.beta2 = 1.0f; }, "beta2");
  expect_bad([](train::Hyper& h) { h.eps = 0.0f; }, "eps");
  expect_bad([](train::Hyper& h) { h.min_lr_ratio = 1.5; }, "min_lr_ratio");
  train::Hyper ok;
  ok.micro_batch = 4;
  EXPECT_NO_THROW(ok.validate());

  gpt2::Model model = gpt2::Model::random(tiny_config(), 1);
  train::Hyper long_seq;
  long_seq.seq = 17;  // n_ctx 16
  EXPECT_THROW(train::Trainer(model, long_seq), Error);
}

// ---------------------------------------------------------------------------------------
// Dropout: loss_forward vs a forward built here from plain ops, with the mask computed by
// an own loop over dropout_hash (an independent re-implementation of forge::dropout).
// ---------------------------------------------------------------------------------------

Tensor my_dropout(const Tensor& x, float p, uint64_t seed) {
  std::vector<float> v = values(x);
  const uint32_t threshold = static_cast<uint32_t>(static_cast<double>(p) * 16777216.0);
  const float keep_scale = 1.0f / (1.0f - p);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = (dropout_hash(seed, i) >> 8) >= threshold ? v[i] * keep_scale : 0.0f;
  return Tensor::from_vector(v, x.shape());
}

double hand_loss(const gpt2::Model& m, const data::Batch& b, float p, uint64_t seed) {
  const gpt2::Config& c = m.config();
  const gpt2::Weights& w = m.weights();
  const int64_t B = b.inputs.dim(0), T = b.inputs.dim(1), C = c.n_embd, H = c.n_head;
  auto site = [&](uint64_t s) { return dropout_site_seed(seed, s); };
  Tensor x = embedding(b.inputs, w.wte).reshape({B * T, C});
  for (int64_t r = 0; r < B; ++r) {
    Tensor xr = x.narrow_rows(r * T, T);
    add_(xr, w.wpe.narrow_rows(0, T));
  }
  x = my_dropout(x, p, site(0));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const gpt2::LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const Tensor qkv = matmul(layernorm(x, L.ln_1_w, L.ln_1_b, c.eps), L.attn_w, {}, L.attn_b)
                           .reshape({B, T, 3 * C});
    MatmulSpec qk;
    qk.trans_b = true;
    qk.alpha = 1.0f / std::sqrt(static_cast<float>(C / H));
    Tensor att = softmax(matmul(split_heads(qkv, H, 0), split_heads(qkv, H, 1), qk), true);
    att = my_dropout(att, p, site(1 + 3 * l));
    const Tensor y = merge_heads(matmul(att, split_heads(qkv, H, 2)), H).reshape({B * T, C});
    x = add(x, my_dropout(matmul(y, L.attn_proj_w, {}, L.attn_proj_b), p, site(2 + 3 * l)));
    const Tensor f = gelu(matmul(layernorm(x, L.ln_2_w, L.ln_2_b, c.eps), L.fc_w, {}, L.fc_b));
    x = add(x, my_dropout(matmul(f, L.fc_proj_w, {}, L.fc_proj_b), p, site(3 + 3 * l)));
  }
  const Tensor logits = matmul(layernorm(x, w.ln_f_w, w.ln_f_b, c.eps), w.wte, {.trans_b = true});
  double sum = 0;
  for (float v : values(gather_nll(logits, b.targets.reshape({B * T})))) sum += v;
  return sum / static_cast<double>(B * T);
}

TEST(TrainDropout, MasksMatchIndependentForward) {
  gpt2::Model model = gpt2::Model::random(tiny_config(), 5);
  const auto params = train::parameters(model);
  const data::Batch b = make_batch(3, 16, 71, 0);
  for (float p : {0.0f, 0.1f, 0.5f}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{12345}, uint64_t{0xDEADBEEFCAFEULL}}) {
      ag::Tape tape;
      const double got =
          train::loss_forward(tape, model, params, b.inputs, b.targets, p, seed).item();
      const double want = hand_loss(model, b, p, seed);
      EXPECT_NEAR(got, want, 2e-6 * want) << "p " << p << " seed " << seed;
    }
  }
  // The masks matter: another seed, or dropping one site's mask, changes the loss.
  ag::Tape t1, t2;
  const double a = train::loss_forward(t1, model, params, b.inputs, b.targets, 0.3f, 1).item();
  const double c = train::loss_forward(t2, model, params, b.inputs, b.targets, 0.3f, 2).item();
  EXPECT_GT(std::abs(a - c), 1e-4);
  EXPECT_GT(std::abs(a - hand_loss(model, b, 0.0f, 1)), 1e-4);
}

TEST(TrainDropout, EachSequenceDrawsTheMasksOfItsPlaceInTheBatch) {
  // Sequences do not interact, so with masks keyed by the global position the loss of a
  // 3-row batch is the token-weighted mean of its slices' losses, each slice passing its
  // first_sequence: what makes data-parallel and micro-batched dropout equal one batch's.
  gpt2::Model model = gpt2::Model::random(tiny_config(), 5);
  const auto params = train::parameters(model);
  const data::Batch b = make_batch(3, 16, 71, 0);
  auto loss = [&](int64_t first, int64_t rows, int64_t first_sequence) {
    ag::Tape tape;
    return train::loss_forward(tape, model, params, b.inputs.narrow_rows(first, rows),
                               b.targets.narrow_rows(first, rows), 0.4f, 99, first_sequence)
        .item();
  };
  const double whole = loss(0, 3, 0);
  const double parts = (loss(0, 1, 0) + 2.0 * loss(1, 2, 1)) / 3.0;
  EXPECT_NEAR(parts, whole, 2e-6 * whole);
  // Keyed by place: the same slice drawn as if it were the batch's start differs.
  EXPECT_GT(std::abs((loss(0, 1, 0) + 2.0 * loss(1, 2, 0)) / 3.0 - whole), 1e-4);
  EXPECT_THROW(loss(0, 1, -1), Error);
}

TEST(TrainForward, RejectsBadInput) {
  gpt2::Model model = gpt2::Model::random(tiny_config(), 5);
  auto params = train::parameters(model);
  const data::Batch b = make_batch(2, 8, 71, 0);
  auto run = [&](const Tensor& in, const Tensor& tg, float p, std::vector<ag::Parameter> ps) {
    ag::Tape tape;
    train::loss_forward(tape, model, ps, in, tg, p, 0);
  };
  EXPECT_THROW(run(b.inputs, b.targets, 1.0f, params), Error);
  EXPECT_THROW(run(b.inputs, b.targets.reshape({1, 16}), 0.0f, params), Error);
  EXPECT_THROW(run(Tensor::from_vector(std::vector<uint32_t>{71}, {1, 1}),
                   Tensor::from_vector(std::vector<uint32_t>{0}, {1, 1}), 0.0f, params),
               Error);
  const data::Batch long_b = make_batch(1, 17, 71, 0);  // T 17 > n_ctx 16
  EXPECT_THROW(run(long_b.inputs, long_b.targets, 0.0f, params), Error);
  auto fewer = params;
  fewer.pop_back();
  EXPECT_THROW(run(b.inputs, b.targets, 0.0f, fewer), Error);
  try {
    run(Tensor::from_vector(std::vector<float>{1.0f}, {1, 1}), b.targets, 0.0f, params);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("train::loss_forward:", 0), 0u) << e.what();
  }
}

// ---------------------------------------------------------------------------------------
// The step
// ---------------------------------------------------------------------------------------

TEST(TrainTrainer, MicroBatchesAverageGradients) {
  // One step over a batch of 4 rows equals one step over 2 micro-batches of 2 rows, with
  // dropout too: its masks belong to each sequence's place in the step's batch, so the
  // split changes only the summation order.
  const data::Batch all = make_batch(4, 16, 71, 3);
  const data::Batch lo{all.inputs.narrow_rows(0, 2), all.targets.narrow_rows(0, 2)};
  const data::Batch hi{all.inputs.narrow_rows(2, 2), all.targets.narrow_rows(2, 2)};
  for (float p : {0.0f, 0.3f}) {
    gpt2::Model m1 = gpt2::Model::random(tiny_config(), 9);
    gpt2::Model m2 = gpt2::Model::random(tiny_config(), 9);
    train::Hyper h;
    h.clip = 0;  // compare raw gradients
    h.dropout = p;
    train::Trainer t1(m1, h), t2(m2, h);
    const train::StepStats s1 = t1.step({all});
    const train::StepStats s2 = t2.step({lo, hi});
    EXPECT_NEAR(s1.loss, s2.loss, 1e-6 * s1.loss) << "dropout " << p;
    EXPECT_NEAR(s1.grad_norm, s2.grad_norm, 1e-5 * s1.grad_norm) << "dropout " << p;
    EXPECT_EQ(s1.tokens, 64);
    EXPECT_EQ(s2.tokens, 64);
    for (size_t i = 0; i < t1.params().size(); ++i)
      EXPECT_LE(rel_err(values(t2.params()[i].grad()), values(t1.params()[i].grad())), 1e-5)
          << t1.params()[i].name() << " dropout " << p;
  }
}

TEST(TrainTrainer, NonFiniteStepIsSkipped) {
  gpt2::Model model = gpt2::Model::random(tiny_config(), 2);
  train::Hyper h;
  train::Trainer trainer(model, h);
  const data::Batch b = make_batch(2, 16, 71, 1);
  ASSERT_FALSE(trainer.step({b}).skipped);
  // Poison one weight: the loss (and every gradient) becomes NaN.
  Tensor& w = trainer.params()[4].value();  // h.0.attn.c_attn.weight
  std::vector<float> v = values(w);
  v[7] = std::nanf("");
  w.copy_from(v);
  std::vector<std::vector<float>> before;
  for (const auto& p : trainer.params()) before.push_back(values(p.value()));
  const train::StepStats s = trainer.step({b});
  EXPECT_TRUE(s.skipped);
  EXPECT_FALSE(std::isfinite(s.loss));
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(trainer.step_count(), 2);
  for (size_t i = 0; i < before.size(); ++i) {
    const auto now = values(trainer.params()[i].value());
    EXPECT_EQ(std::memcmp(now.data(), before[i].data(), now.size() * sizeof(float)), 0)
        << trainer.params()[i].name();
  }
  // Repaired, training goes on.
  v[7] = 0.01f;
  w.copy_from(v);
  EXPECT_FALSE(trainer.step({b}).skipped);
}

TEST(TrainTrainer, RejectsBadBatches) {
  gpt2::Model model = gpt2::Model::random(tiny_config(), 2);
  train::Trainer trainer(model, train::Hyper{});
  EXPECT_THROW(trainer.step({}), Error);
  const data::Batch a = make_batch(2, 16, 71, 1), b = make_batch(1, 16, 71, 1);
  EXPECT_THROW(trainer.step({a, b}), Error);  // micro-batches of different shapes
  EXPECT_THROW(trainer.step({data::Batch{a.inputs, Tensor()}}), Error);
  EXPECT_THROW(trainer.evaluate({}), Error);
  EXPECT_EQ(trainer.step_count(), 0);
}

TEST(TrainTrainer, EvaluateMatchesGpt2Evaluate) {
  gpt2::Model model = gpt2::Model::random(tiny_config(), 4);
  train::Trainer trainer(model, train::Hyper{});
  // Windows of T + 1 tokens: gpt2::evaluate scores the same next-token targets.
  std::vector<data::Batch> batches;
  double want = 0;
  for (uint64_t k = 0; k < 3; ++k) {
    const data::Batch b = make_batch(2, 15, 71, k);
    batches.push_back(b);
    const auto in = b.inputs.to_vector<uint32_t>(), tg = b.targets.to_vector<uint32_t>();
    std::vector<uint32_t> ids;
    for (int r = 0; r < 2; ++r) {
      ids.insert(ids.end(), in.begin() + r * 15, in.begin() + r * 15 + 15);
      ids.push_back(tg[static_cast<size_t>(r * 15 + 14)]);
    }
    want += gpt2::evaluate(model, Tensor::from_vector(ids, {2, 16})).loss / 3.0;
  }
  EXPECT_NEAR(trainer.evaluate(batches), want, 1e-5 * want);
}

// ---------------------------------------------------------------------------------------
// Against PyTorch
// ---------------------------------------------------------------------------------------

json tensor_json(const Tensor& t) { return json(values(t)); }

TEST(TrainTorch, AdamWParamGroupsMatchTorch) {
  FORGE_REQUIRE_TORCH();
  gpt2::Model model = gpt2::Model::random(tiny_config(), 21);
  train::Hyper h;
  h.lr = 1e-2;  // large, so a wrong decay group or bias correction shows
  h.warmup = 2;
  h.steps = 3;
  h.weight_decay = 0.5f;
  train::Trainer trainer(model, h);
  json in;
  in["params"] = json::array();
  for (const auto& p : trainer.params()) {
    json j;
    j["name"] = p.name();
    j["shape"] = p.value().shape().dims();
    j["value"] = tensor_json(p.value());
    j["decay"] = p.value().rank() >= 2;
    j["grads"] = json::array();
    in["params"].push_back(j);
  }
  in["lrs"] = json::array();
  for (uint64_t k = 0; k < 3; ++k) {
    const train::StepStats s = trainer.step({make_batch(2, 16, 71, k)});
    ASSERT_FALSE(s.skipped);
    in["lrs"].push_back(static_cast<double>(static_cast<float>(s.lr)));
    for (size_t i = 0; i < trainer.params().size(); ++i)
      in["params"][i]["grads"].push_back(tensor_json(trainer.params()[i].grad()));
  }
  in["beta1"] = h.beta1;
  in["beta2"] = h.beta2;
  in["eps"] = h.eps;
  in["weight_decay"] = h.weight_decay;
  const json out = run_python("train_adamw.py", in);
  for (const auto& p : trainer.params()) {
    const auto want = out["values"][p.name()].get<std::vector<double>>();
    const auto got = values(p.value());
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]) / (1e-3 + std::abs(want[i])));
    EXPECT_LE(worst, 1e-5) << p.name();
  }
}

TEST(TrainTorch, ThirtyStepsMatchPyTorchTrainer) {
  FORGE_REQUIRE_TORCH();
  const gpt2::Config cfg = tiny_config();
  gpt2::Model model = gpt2::Model::random(cfg, 77);
  const std::string dir = temp_dir("ref30");
  model.save(dir);  // the reference starts from these very weights
  train::Hyper h;
  h.steps = 30;
  h.batch = 4;
  h.micro_batch = 2;
  h.seq = 16;
  h.lr = 3e-3;
  h.warmup = 5;
  train::Trainer trainer(model, h);
  json in;
  in["weights"] = dir + "/model.safetensors";
  in["config"] = {{"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},         {"n_embd", cfg.n_embd},
                  {"n_ctx", cfg.n_ctx},     {"vocab_size", cfg.vocab_size}, {"eps", cfg.eps}};
  in["hyper"] = {{"steps", h.steps},
                 {"lr", h.lr},
                 {"min_lr_ratio", h.min_lr_ratio},
                 {"warmup", h.warmup},
                 {"beta1", h.beta1},
                 {"beta2", h.beta2},
                 {"eps", h.eps},
                 {"weight_decay", h.weight_decay},
                 {"clip", h.clip}};
  std::vector<train::StepStats> stats;
  in["steps"] = json::array();
  for (int64_t k = 0; k < h.steps; ++k) {
    std::vector<data::Batch> micro;
    json jm = json::array();
    for (int i = 0; i < 2; ++i) {
      micro.push_back(make_batch(2, 16, cfg.vocab_size, static_cast<uint64_t>(2 * k + i)));
      const int64_t T = micro.back().inputs.dim(1);
      auto rows = [T](const Tensor& t) {
        const auto v = t.to_vector<uint32_t>();
        std::vector<std::vector<uint32_t>> r;
        for (size_t s = 0; s < v.size(); s += static_cast<size_t>(T))
          r.emplace_back(v.begin() + static_cast<long>(s), v.begin() + static_cast<long>(s) + T);
        return r;
      };
      jm.push_back(
          {{"inputs", rows(micro.back().inputs)}, {"targets", rows(micro.back().targets)}});
    }
    in["steps"].push_back(jm);
    stats.push_back(trainer.step(micro));
  }
  const json out = run_python("train_reference.py", in);
  const auto losses = out["losses"].get<std::vector<double>>();
  const auto norms = out["grad_norms"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), stats.size());
  double worst = 0;
  for (size_t k = 0; k < losses.size(); ++k) {
    const double rel = std::abs(stats[k].loss - losses[k]) / losses[k];
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-4) << "step " << k + 1 << ": forge " << stats[k].loss << ", torch "
                         << losses[k];
    EXPECT_LE(std::abs(stats[k].grad_norm - norms[k]) / norms[k], 1e-3) << "step " << k + 1;
  }
  // Training made progress (the comparison is not between two flat lines).
  EXPECT_LT(losses.back(), losses.front() - 0.5);
  std::printf("30 steps: loss %.4f -> %.4f, worst relative loss difference %.2e\n", losses.front(),
              losses.back(), worst);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace forge::test
