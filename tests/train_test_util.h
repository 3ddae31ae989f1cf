// What the training test files share (test_train.cpp, test_train_state.cpp, ...): golden
// files, temporary folders, a tiny config and hyperparameters, structured batches, and exact
// and relative comparisons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "forge/data.h"
#include "forge/gpt2.h"
#include "forge/tensor.h"
#include "forge/train.h"

namespace forge::test {

using nlohmann::json;

inline std::string golden_dir(const std::string& name) {
  return std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/" + name;
}

inline json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

/// A fresh temporary folder for one test.
inline std::string temp_dir(const std::string& tag) {
  const std::string d =
      ::testing::TempDir() + "/forge_train_" + tag + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

/// A tiny GPT-2 (odd vocabulary, 2 layers, 2 heads) for fast training tests.
inline gpt2::Config tiny_config() {
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

/// Steps of 2 micro-batches [2, 16], dropout 0.1 and clipping at 0.5 (the norm is read
/// every step): for tests that run two trainers side by side.
inline train::Hyper two_micro_batch_hyper() {
  train::Hyper h;
  h.steps = 10;
  h.batch = 4;
  h.micro_batch = 2;
  h.seq = 16;
  h.dropout = 0.1f;
  h.clip = 0.5;
  return h;
}

/// Every trained parameter of `a` equals `b`'s bit for bit (the same model shape).
inline void expect_same_weights(const train::Trainer& a, const train::Trainer& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t i = 0; i < a.params().size(); ++i)
    EXPECT_EQ(a.params()[i].value().to_vector<float>(), b.params()[i].value().to_vector<float>())
        << a.params()[i].name();
}

/// Deterministic "text" with structure (so training makes progress): a noisy walk over the
/// vocabulary, cut into B windows of T + 1 tokens per batch, batch index `k`.
inline data::Batch make_batch(int64_t B, int64_t T, int64_t V, uint64_t k) {
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

/// Step k's two micro-batches [2, 16] of tiny_config's vocabulary (batches 2k and 2k + 1), as
/// two_micro_batch_hyper takes them.
inline std::vector<data::Batch> two_micro_batches(int64_t k) {
  const int64_t V = tiny_config().vocab_size;
  return {make_batch(2, 16, V, static_cast<uint64_t>(2 * k)),
          make_batch(2, 16, V, static_cast<uint64_t>(2 * k + 1))};
}

inline std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

inline bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = values(a), y = values(b);
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

/// ||a - b|| / ||b|| in double.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace forge::test
