// GPT-2 training (include/forge/train.h): gradients of the training forward vs HF
// transformers' float64 gradients (golden files), AdamW param groups vs torch.optim.AdamW,
// 30 training steps vs a plain-PyTorch float64 trainer, dropout masks vs an independent
// forward, the schedule, validation, NaN skipping, and the training state (round trip,
// bit-identical resume, bad files).
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

namespace forge::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string golden_dir(const std::string& name) {
  return std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/" + name;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

/// A fresh temporary folder for one test.
std::string temp_dir(const std::string& tag) {
  const std::string d =
      ::testing::TempDir() + "/forge_train_" + tag + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// A tiny GPT-2 (odd vocabulary, 2 layers, 2 heads) for fast training tests.
gpt2::Config tiny_config() {
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.n_ctx = 16;
  c.vocab_size = 71;
  c.bos_id = c.eos_id = 70;
  c.validate();
  return c;
}

/// Deterministic "text" with structure (so training makes progress): a noisy walk over the
/// vocabulary, cut into B windows of T + 1 tokens per batch, batch index `k`.
data::Batch make_batch(int64_t B, int64_t T, int64_t V, uint64_t k) {
  std::vector<uint32_t> in, tg;
  for (int64_t b = 0; b < B; ++b) {
    uint64_t s = 0x9E3779B97F4A7C15ULL * (k * 131 + static_cast<uint64_t>(b) + 1);
    uint32_t tok = static_cast<uint32_t>(s % static_cast<uint64_t>(V));
    std::vector<uint32_t> seq;
    for (int64_t t = 0; t <= T; ++t) {
      seq.push_back(tok);
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint32_t r = static_cast<uint32_t>(s >> 59);  // 0..31
      tok = r < 24 ? (tok * 7 + 3) % static_cast<uint32_t>(V)
                   : (r * 5 + tok) % static_cast<uint32_t>(V);
    }
    in.insert(in.end(), seq.begin(), seq.end() - 1);
    tg.insert(tg.end(), seq.begin() + 1, seq.end());
  }
  return {Tensor::from_vector(in, {B, T}), Tensor::from_vector(tg, {B, T})};
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = values(a), y = values(b);
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

/// ||a - b|| / ||b|| in double.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

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
  // One step over a batch of 4 rows equals one step over 2 micro-batches of 2 rows.
  const data::Batch all = make_batch(4, 16, 71, 3);
  const data::Batch lo{all.inputs.narrow_rows(0, 2), all.targets.narrow_rows(0, 2)};
  const data::Batch hi{all.inputs.narrow_rows(2, 2), all.targets.narrow_rows(2, 2)};
  gpt2::Model m1 = gpt2::Model::random(tiny_config(), 9);
  gpt2::Model m2 = gpt2::Model::random(tiny_config(), 9);
  train::Hyper h;
  h.clip = 0;  // compare raw gradients
  train::Trainer t1(m1, h), t2(m2, h);
  const train::StepStats s1 = t1.step({all});
  const train::StepStats s2 = t2.step({lo, hi});
  EXPECT_NEAR(s1.loss, s2.loss, 1e-6 * s1.loss);
  EXPECT_NEAR(s1.grad_norm, s2.grad_norm, 1e-5 * s1.grad_norm);
  EXPECT_EQ(s1.tokens, 64);
  EXPECT_EQ(s2.tokens, 64);
  for (size_t i = 0; i < t1.params().size(); ++i)
    EXPECT_LE(rel_err(values(t2.params()[i].grad()), values(t1.params()[i].grad())), 1e-5)
        << t1.params()[i].name();
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

// ---------------------------------------------------------------------------------------
// Training state
// ---------------------------------------------------------------------------------------

train::Hyper resume_hyper() {
  train::Hyper h;
  h.steps = 6;
  h.batch = 4;
  h.micro_batch = 2;
  h.lr = 2e-3;
  h.warmup = 2;
  h.dropout = 0.1f;  // dropout seeds must follow the step count across a resume
  h.seed = 99;
  return h;
}

std::vector<data::Batch> step_batches(int64_t k) {
  return {make_batch(2, 16, 71, static_cast<uint64_t>(2 * k)),
          make_batch(2, 16, 71, static_cast<uint64_t>(2 * k + 1))};
}

TEST(TrainState, RoundTripIsBitIdentical) {
  const std::string dir = temp_dir("roundtrip");
  gpt2::Model a = gpt2::Model::random(tiny_config(), 3);
  train::Trainer ta(a, resume_hyper());
  for (int64_t k = 0; k < 2; ++k) ta.step(step_batches(k));
  ta.save_state(dir + "/s1.safetensors", {{"sampler", "1234"}, {"note", "ü"}});

  gpt2::Model b = gpt2::Model::random(tiny_config(), 4);  // other weights: all overwritten
  train::Trainer tb(b, resume_hyper());
  const auto meta = tb.load_state(dir + "/s1.safetensors");
  EXPECT_EQ(meta.at("sampler"), "1234");
  EXPECT_EQ(meta.at("note"), "ü");
  EXPECT_EQ(meta.at("forge.step"), "2");
  EXPECT_EQ(tb.step_count(), 2);
  tb.save_state(dir + "/s2.safetensors", {{"sampler", "1234"}, {"note", "ü"}});
  // Every tensor (weights and both moments) and all metadata equal, byte for byte.
  const SafeTensorsFile f1 = SafeTensorsFile::open(dir + "/s1.safetensors");
  const SafeTensorsFile f2 = SafeTensorsFile::open(dir + "/s2.safetensors");
  EXPECT_EQ(f1.names(), f2.names());
  EXPECT_EQ(f1.metadata(), f2.metadata());
  EXPECT_EQ(f1.names().size(), 3 * ta.params().size());
  for (const std::string& n : f1.names()) {
    const auto r1 = f1.raw(n), r2 = f2.raw(n);
    ASSERT_EQ(r1.size(), r2.size()) << n;
    EXPECT_EQ(std::memcmp(r1.data(), r2.data(), r1.size()), 0) << n;
  }
  for (size_t i = 0; i < ta.params().size(); ++i)
    EXPECT_TRUE(bits_equal(ta.params()[i].value(), tb.params()[i].value()));
  // The model the trainer wraps holds the loaded weights (parameters alias them).
  EXPECT_TRUE(bits_equal(b.weights().wpe, a.weights().wpe));
  EXPECT_THROW(ta.save_state(dir + "/s3.safetensors", {{"forge.step", "7"}}), Error);
  EXPECT_THROW(ta.save_state(dir + "/no/such/dir/s.safetensors", {}), Error);
  fs::remove_all(dir);
}

TEST(TrainState, ResumeIsBitIdentical) {
  const std::string dir = temp_dir("resume");
  // Uninterrupted: 6 steps.
  gpt2::Model a = gpt2::Model::random(tiny_config(), 8);
  train::Trainer ta(a, resume_hyper());
  std::vector<double> losses_a;
  for (int64_t k = 0; k < 6; ++k) losses_a.push_back(ta.step(step_batches(k)).loss);
  // Interrupted after 3: save, a fresh process (fresh model and trainer), load, 3 more.
  std::vector<double> losses_b;
  {
    gpt2::Model b = gpt2::Model::random(tiny_config(), 8);
    train::Trainer tb(b, resume_hyper());
    for (int64_t k = 0; k < 3; ++k) losses_b.push_back(tb.step(step_batches(k)).loss);
    tb.save_state(dir + "/state.safetensors", {});
  }
  gpt2::Model c = gpt2::Model::random(tiny_config(), 1234);
  train::Trainer tc(c, resume_hyper());
  tc.load_state(dir + "/state.safetensors");
  for (int64_t k = tc.step_count(); k < 6; ++k) losses_b.push_back(tc.step(step_batches(k)).loss);
  ASSERT_EQ(losses_a.size(), losses_b.size());
  for (size_t k = 0; k < losses_a.size(); ++k)
    EXPECT_EQ(std::memcmp(&losses_a[k], &losses_b[k], sizeof(double)), 0)
        << "step " << k + 1 << ": " << losses_a[k] << " vs " << losses_b[k];
  for (size_t i = 0; i < ta.params().size(); ++i)
    EXPECT_TRUE(bits_equal(ta.params()[i].value(), tc.params()[i].value()))
        << ta.params()[i].name();
  fs::remove_all(dir);
}

void expect_load_error(train::Trainer& t, const std::string& path, ErrorKind kind,
                       const char* needle) {
  try {
    t.load_state(path);
    ADD_FAILURE() << "no error loading " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("train::Trainer::load_state", 0), 0u) << e.what();
  }
}

TEST(TrainState, BadFilesAreRejectedCleanly) {
  const std::string dir = temp_dir("bad");
  gpt2::Model a = gpt2::Model::random(tiny_config(), 3);
  train::Trainer ta(a, resume_hyper());
  ta.step(step_batches(0));
  const std::string good = dir + "/good.safetensors";
  ta.save_state(good, {});

  gpt2::Model b = gpt2::Model::random(tiny_config(), 4);
  train::Trainer tb(b, resume_hyper());
  const std::vector<float> wpe_before = values(b.weights().wpe);
  expect_load_error(tb, dir + "/missing.safetensors", ErrorKind::Io, "missing");
  // Truncated: half the file.
  {
    std::ifstream f(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::ofstream(dir + "/cut.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::ofstream(dir + "/junk.safetensors", std::ios::binary) << "not a safetensors file at all";
  }
  expect_load_error(tb, dir + "/cut.safetensors", ErrorKind::Format, "");
  expect_load_error(tb, dir + "/junk.safetensors", ErrorKind::Format, "");
  // A model folder's weights are not a training state.
  a.save(dir + "/model");
  expect_load_error(tb, dir + "/model/model.safetensors", ErrorKind::Format, "forge.format");
  // Another config: wider (shapes differ), or same shapes but other heads.
  gpt2::Config wide = tiny_config();
  wide.n_embd = 48;
  gpt2::Model w = gpt2::Model::random(wide, 1);
  train::Trainer tw(w, resume_hyper());
  expect_load_error(tw, good, ErrorKind::Format, "does not match");
  gpt2::Config heads = tiny_config();
  heads.n_head = 4;
  gpt2::Model hm = gpt2::Model::random(heads, 1);
  train::Trainer th(hm, resume_hyper());
  expect_load_error(th, good, ErrorKind::Format, "does not match");
  // A tensor missing (an untied model expects an lm_head).
  gpt2::Config untied = tiny_config();
  untied.tie_word_embeddings = false;
  gpt2::Model um = gpt2::Model::random(untied, 1);
  train::Trainer tu(um, resume_hyper());
  expect_load_error(tu, good, ErrorKind::Format, "does not match");
  // Nothing changed by the failed loads.
  EXPECT_EQ(values(b.weights().wpe), wpe_before);
  EXPECT_EQ(tb.step_count(), 0);
  EXPECT_NO_THROW(tb.load_state(good));
  EXPECT_EQ(tb.step_count(), 1);
  fs::remove_all(dir);
}

// good's tensors and metadata, changed by `change`, written to `path`.
void rewrite_state(
    const std::string& good, const std::string& path,
    const std::function<void(NamedTensors&, std::map<std::string, std::string>&)>& change) {
  const SafeTensorsFile file = SafeTensorsFile::open(good);
  NamedTensors tensors;
  for (const std::string& name : file.names()) tensors.emplace_back(name, file.load(name).clone());
  std::map<std::string, std::string> meta = file.metadata();
  change(tensors, meta);
  save_safetensors(path, tensors, meta);
}

Tensor& tensor_named(NamedTensors& tensors, const std::string& name) {
  for (auto& [n, t] : tensors)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// Files that parse as safetensors but are not a state this trainer can resume from.
TEST(TrainState, CorruptStatesAreRejectedCleanly) {
  const std::string dir = temp_dir("corrupt");
  gpt2::Model a = gpt2::Model::random(tiny_config(), 3);
  train::Trainer ta(a, resume_hyper());
  ta.step(step_batches(0));
  ta.step(step_batches(1));
  const std::string good = dir + "/good.safetensors";
  ta.save_state(good, {});
  const std::string wte = ta.params()[0].name();
  gpt2::Model b = gpt2::Model::random(tiny_config(), 4);
  train::Trainer tb(b, resume_hyper());
  const std::vector<float> wpe_before = values(b.weights().wpe);
  using Meta = std::map<std::string, std::string>;
  auto meta_case = [&](const char* file, const char* key, const std::string& value,
                       const char* needle) {
    const std::string path = dir + "/" + file;
    rewrite_state(good, path, [&](NamedTensors&, Meta& meta) { meta[key] = value; });
    SCOPED_TRACE(std::string(key) + " = " + value);
    expect_load_error(tb, path, ErrorKind::Format, needle);
  };
  meta_case("version.safetensors", "forge.version", "2", "version \"2\"");
  meta_case("version_empty.safetensors", "forge.version", "", "version");
  meta_case("updates.safetensors", "forge.updates", "3", "bad step counts");  // 2 steps taken
  meta_case("step_neg.safetensors", "forge.step", "-1", "bad step counts");
  meta_case("step_text.safetensors", "forge.step", "two", "bad step counts");
  meta_case("step_huge.safetensors", "forge.step", "99999999999999999999", "bad step counts");
  meta_case("hyper_json.safetensors", "forge.hyper", "{not json", "hyper");
  meta_case("hyper_type.safetensors", "forge.hyper", "[1, 2]", "hyper");
  meta_case("hyper_field.safetensors", "forge.hyper", R"({"steps": 10})", "hyperparameter");
  meta_case("config_json.safetensors", "forge.config", "{\"n_layer\": ", "forge.config");
  meta_case("config_bad.safetensors", "forge.config",
            R"({"n_layer": 2, "n_head": 3, "n_embd": 32, "n_positions": 16, "vocab_size": 64})",
            "forge.config");
  {
    const std::string path = dir + "/no_step.safetensors";
    rewrite_state(good, path, [](NamedTensors&, Meta& meta) { meta.erase("forge.step"); });
    expect_load_error(tb, path, ErrorKind::Format, "forge.step");
  }
  // A tensor of the wrong dtype, one tensor too many, one too few.
  {
    const std::string path = dir + "/dtype.safetensors";
    rewrite_state(good, path, [&](NamedTensors& t, Meta&) {
      Tensor& m = tensor_named(t, "optim.exp_avg." + wte);
      m = Tensor::from_vector(std::vector<uint32_t>(static_cast<size_t>(m.numel()), 1u), m.shape());
    });
    expect_load_error(tb, path, ErrorKind::Format, "does not match the model's F32");
  }
  {
    const std::string path = dir + "/extra.safetensors";
    rewrite_state(good, path, [](NamedTensors& t, Meta&) {
      t.emplace_back("optim.extra", Tensor::full({3}, 1.0f));
    });
    expect_load_error(tb, path, ErrorKind::Format, "tensors, which does not match");
  }
  {
    const std::string path = dir + "/fewer.safetensors";
    rewrite_state(good, path, [](NamedTensors& t, Meta&) { t.pop_back(); });
    expect_load_error(tb, path, ErrorKind::Format, "tensors, which does not match");
  }
  // Values AdamW cannot resume from: NaN, an infinity or a negative number in the second
  // moment (also after the first element, and in the last parameter); NaN in the first
  // moment or a weight.
  struct ValueCase {
    std::string tensor;
    size_t index;
    float value;
    const char* needle;
  };
  const std::string last = ta.params().back().name();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<ValueCase> value_cases = {
      {"optim.exp_avg_sq." + wte, 0, nan, "second moment"},
      {"optim.exp_avg_sq." + wte, 17, inf, "second moment"},
      {"optim.exp_avg_sq." + last, 5, -1e-8f, "second moment"},
      {"optim.exp_avg_sq." + last, 0, -inf, "second moment"},
      {"optim.exp_avg." + wte, 3, nan, "finite"},
      {"optim.exp_avg." + last, 1, -inf, "finite"},
      {wte, 9, inf, "finite"},
      {last, 2, nan, "finite"}};
  for (size_t k = 0; k < value_cases.size(); ++k) {
    const ValueCase& c = value_cases[k];
    const std::string path = dir + "/value" + std::to_string(k) + ".safetensors";
    rewrite_state(good, path, [&](NamedTensors& t, Meta&) {
      Tensor& x = tensor_named(t, c.tensor);
      std::vector<float> v = x.to_vector<float>();
      ASSERT_LT(c.index, v.size());
      v[c.index] = c.value;
      x = Tensor::from_vector(v, x.shape());
    });
    SCOPED_TRACE(c.tensor + "[" + std::to_string(c.index) + "] = " + std::to_string(c.value));
    expect_load_error(tb, path, ErrorKind::Format, c.needle);
  }
  // A second moment of exactly 0 and -0 is fine (a parameter whose gradient was always 0).
  {
    const std::string path = dir + "/zero_v.safetensors";
    rewrite_state(good, path, [&](NamedTensors& t, Meta&) {
      Tensor& x = tensor_named(t, "optim.exp_avg_sq." + wte);
      std::vector<float> v = x.to_vector<float>();
      v[0] = 0.0f;
      v[1] = -0.0f;
      x = Tensor::from_vector(v, x.shape());
    });
    gpt2::Model z = gpt2::Model::random(tiny_config(), 5);
    train::Trainer tz(z, resume_hyper());
    EXPECT_NO_THROW(tz.load_state(path));
  }
  // None of the failed loads changed the trainer; the good file still loads.
  EXPECT_EQ(values(b.weights().wpe), wpe_before);
  EXPECT_EQ(tb.step_count(), 0);
  EXPECT_NO_THROW(tb.load_state(good));
  EXPECT_EQ(tb.step_count(), 2);
  fs::remove_all(dir);
}

TEST(TrainState, KillDuringSaveLeavesLoadableState) {
  // A child process saves the state over and over and is killed with SIGKILL at several
  // moments of a save (mid-write, mid-fsync, mid-rename): the path must always hold a
  // complete state. The child reports each finished save through a pipe; the parent waits
  // for the first report (a blocking read: no timeout to outlast on a slow or sanitized
  // build), then kills it a few milliseconds later, a different delay each trial, inside
  // one of its later saves.
  const std::string dir = temp_dir("kill");
  const std::string path = dir + "/state.safetensors";
  gpt2::Config cfg = tiny_config();
  cfg.n_embd = 128;
  cfg.n_head = 4;
  cfg.vocab_size = 4000;  // ~11 MB per save: long enough to be killed inside one
  gpt2::Model model = gpt2::Model::random(cfg, 6);
  train::Trainer trainer(model, train::Hyper{});
  trainer.save_state(path, {{"round", "0"}});
  for (int trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    int report[2];
    ASSERT_EQ(pipe(report), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // never returns into the test runner
      close(report[0]);
      try {
        for (int r = 1;; ++r) {
          trainer.save_state(path, {{"round", std::to_string(r)}});
          const char done = 1;
          if (write(report[1], &done, 1) != 1) _exit(1);
        }
      } catch (...) {
        _exit(2);
      }
    }
    close(report[1]);
    char done = 0;
    const ssize_t got = read(report[0], &done, 1);
    if (got == 1) {
      // Readable while the child goes on replacing it.
      EXPECT_NO_THROW((void)SafeTensorsFile::open(path).metadata().at("round"));
      usleep(static_cast<useconds_t>(1000 + 3000 * trial));
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(report[0]);
    ASSERT_EQ(got, 1) << "the child ended before it finished a save";
    EXPECT_TRUE(WIFSIGNALED(status));
    gpt2::Model other = gpt2::Model::random(cfg, 7);
    train::Trainer loaded(other, train::Hyper{});
    std::map<std::string, std::string> meta;
    ASSERT_NO_THROW(meta = loaded.load_state(path));
    ASSERT_TRUE(meta.count("round"));
    // The child had finished a save of its own: the file is one of those, whole.
    EXPECT_NE(meta.at("round"), "0");
    EXPECT_TRUE(bits_equal(other.weights().wte, model.weights().wte));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace forge::test
