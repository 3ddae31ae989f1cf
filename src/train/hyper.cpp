// Hyperparameters: validation, the learning-rate schedule, the JSON form kept in training
// state files, and the per-micro-batch dropout seed.
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "forge/error.h"
#include "forge/ops.h"
#include "train/train_impl.h"

namespace forge::train {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorKind::Range, "train::Hyper: " + what);
}

std::string num(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

/// Comparisons are written so that NaN fails them.
void require(bool ok, const char* option, const char* rule, double got) {
  if (!ok) bad(std::string(option) + " must be " + rule + ", got " + num(got));
}

}  // namespace

void Hyper::validate() const {
  require(steps >= 1, "--steps", ">= 1", static_cast<double>(steps));
  require(batch >= 1, "--batch", ">= 1", static_cast<double>(batch));
  require(micro_batch >= 0 && micro_batch <= batch, "--micro-batch",
          "in [0, batch] (0: the whole batch)", static_cast<double>(micro_batch));
  if (micro_batch > 0 && batch % micro_batch != 0)
    bad("--micro-batch " + std::to_string(micro_batch) + " must divide --batch " +
        std::to_string(batch));
  require(seq >= 0, "--seq", ">= 0 (0: the model's context)", static_cast<double>(seq));
  require(std::isfinite(lr) && lr > 0.0, "--lr", "finite and > 0", lr);
  require(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0, "min_lr_ratio", "in [0, 1]", min_lr_ratio);
  require(warmup >= 0, "--warmup", ">= 0", static_cast<double>(warmup));
  require(beta1 >= 0.0f && beta1 < 1.0f, "beta1", "in [0, 1)", beta1);
  require(beta2 >= 0.0f && beta2 < 1.0f, "beta2", "in [0, 1)", beta2);
  require(std::isfinite(eps) && eps > 0.0f, "eps", "finite and > 0", eps);
  require(std::isfinite(weight_decay) && weight_decay >= 0.0f, "--weight-decay", "finite and >= 0",
          weight_decay);
  require(std::isfinite(clip) && clip >= 0.0, "--clip", "finite and >= 0 (0: off)", clip);
  require(dropout >= 0.0f && dropout < 1.0f, "--dropout", "in [0, 1)", dropout);
}

double learning_rate(const Hyper& h, int64_t step) {
  if (step < 0)
    throw Error(ErrorKind::Range,
                "train::learning_rate: step must be >= 0, got " + std::to_string(step));
  if (step < h.warmup) return h.lr * static_cast<double>(step + 1) / static_cast<double>(h.warmup);
  const double min_lr = h.lr * h.min_lr_ratio;
  const int64_t span = h.steps - h.warmup;
  if (step >= h.steps || span <= 0) return min_lr;
  const double progress = static_cast<double>(step - h.warmup) / static_cast<double>(span);
  const double pi = std::acos(-1.0);
  return min_lr + 0.5 * (1.0 + std::cos(pi * progress)) * (h.lr - min_lr);
}

std::string hyper_to_json(const Hyper& h) {
  nlohmann::json j;
  j["steps"] = h.steps;
  j["batch"] = h.batch;
  j["micro_batch"] = h.micro_batch;
  j["seq"] = h.seq;
  j["lr"] = h.lr;
  j["min_lr_ratio"] = h.min_lr_ratio;
  j["warmup"] = h.warmup;
  j["beta1"] = h.beta1;
  j["beta2"] = h.beta2;
  j["eps"] = h.eps;
  j["weight_decay"] = h.weight_decay;
  j["clip"] = h.clip;
  j["dropout"] = h.dropout;
  j["seed"] = h.seed;
  return j.dump();
}

Hyper hyper_from_json(const std::string& text, const std::string& source) {
  const std::string fn = "train::Trainer::load_state: " + source;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Format, fn + ": hyperparameters are not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw Error(ErrorKind::Format, fn + ": hyperparameters are not a JSON object");
  auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number())
      throw Error(ErrorKind::Format,
                  fn + ": hyperparameter \"" + key + "\" is missing or not a number");
    return *it;
  };
  auto integer = [&](const char* key) -> int64_t {
    const auto& v = field(key);
    if (!v.is_number_integer())
      throw Error(ErrorKind::Format, fn + ": hyperparameter \"" + key + "\" is not an integer");
    return v.get<int64_t>();
  };
  Hyper h;
  h.steps = integer("steps");
  h.batch = integer("batch");
  h.micro_batch = integer("micro_batch");
  h.seq = integer("seq");
  h.lr = field("lr").get<double>();
  h.min_lr_ratio = field("min_lr_ratio").get<double>();
  h.warmup = integer("warmup");
  h.beta1 = field("beta1").get<float>();
  h.beta2 = field("beta2").get<float>();
  h.eps = field("eps").get<float>();
  h.weight_decay = field("weight_decay").get<float>();
  h.clip = field("clip").get<double>();
  h.dropout = field("dropout").get<float>();
  if (!field("seed").is_number_unsigned())
    throw Error(ErrorKind::Format, fn + ": hyperparameter \"seed\" is not an unsigned integer");
  h.seed = field("seed").get<uint64_t>();
  try {
    h.validate();
  } catch (const Error& e) {
    throw Error(ErrorKind::Format, fn + ": stored hyperparameters are invalid: " + e.what());
  }
  return h;
}

uint64_t step_dropout_seed(uint64_t seed, int64_t step) {
  // The second mix (of 0) keeps the masks of runs made when each micro-batch had a seed of
  // its own (micro-batch 0's), so one-micro-batch runs draw what they always drew.
  return dropout_site_seed(dropout_site_seed(seed, static_cast<uint64_t>(step)), 0);
}

}  // namespace forge::train
