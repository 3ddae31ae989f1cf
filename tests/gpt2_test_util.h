// What the GPT-2 test files share (test_gpt2.cpp, test_gpt2_inputs.cpp,
// test_gpt2_self_consistency.cpp): an error check by kind, function prefix and message,
// scratch folders (removed when the tests end, by the environment test_gpt2.cpp registers),
// token ids, and a small odd-sized config.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/tensor.h"

namespace forge::test::gpt2_tests {

namespace fs = std::filesystem;

// Runs `stmt`, expecting forge::Error of `kind` whose message starts with `prefix` and
// contains `needle`.
#define EXPECT_FORGE_ERROR(stmt, kind_, prefix, needle)                                       \
  do {                                                                                        \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << "no error from: " #stmt;                                               \
    } catch (const ::forge::Error& e) {                                                       \
      const std::string msg = e.what();                                                       \
      EXPECT_EQ(e.kind(), kind_) << msg;                                                      \
      EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;                                             \
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg; \
    }                                                                                         \
  } while (0)

/// All scratch folders of this process live under one folder, removed when the tests end.
inline fs::path scratch_root() {
  return fs::path(::testing::TempDir()) / ("forge_gpt2_" + std::to_string(::getpid()));
}

inline std::string scratch(const std::string& name) {
  const fs::path p = scratch_root() / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

/// Deterministic pseudo-random token ids in [0, vocab).
inline std::vector<uint32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  uint64_t s = seed * 2654435761ULL + 12345;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<uint32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return v;
}

inline Tensor u32(const std::vector<uint32_t>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

/// Two layers of width 48 (3 heads of 16), a context of 40 and a vocabulary of 203: sizes
/// no kernel takes as a special case.
inline gpt2::Config odd_config() {
  gpt2::Config c;
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 48;
  c.n_ctx = 40;
  c.vocab_size = 203;
  c.bos_id = c.eos_id = 0;
  return c;
}

/// Rows of token ids (all of one length) as a U32 tensor [rows, length].
inline Tensor ids_tensor(const std::vector<std::vector<uint32_t>>& rows) {
  std::vector<uint32_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_vector(
      flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

/// The index of the largest of x[0:n] (the first of equals).
inline uint32_t argmax(const float* x, int64_t n) {
  uint32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = static_cast<uint32_t>(i);
  return best;
}

}  // namespace forge::test::gpt2_tests
