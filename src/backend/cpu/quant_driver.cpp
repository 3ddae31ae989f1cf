// The quantized product's driver (quant.h): rounds the activation rows, then cuts the
// weight rows into slices for the thread pool; each slice walks blocks of weight rows small
// enough to stay in L2 while every activation row passes over them, and applies the
// epilogue (alpha, bias, gelu, accumulate) to each finished tile.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu::quant {
namespace {

// Weight rows per block: 64 rows of 768 (3072) Q8_0 values are 51 KiB (204 KiB).
constexpr int64_t kColBlock = 64;
// Below this many weight values a product stays on the calling thread.
constexpr int64_t kSerialValues = 32 * 1024;
constexpr int kTasksPerThread = 2;

size_t block_bytes(DType t) { return t == DType::Q8_0 ? 34 : 18; }

// From this many rows the tile kernel runs, where the CPU has it.
constexpr int64_t kTileRows = 16;

// K = 0: every row is [acc +] gelu?(bias or zeros).
void fill_k0(const Problem& p) {
  std::vector<float> row(static_cast<size_t>(p.N), 0.0f);
  if (p.bias) std::memcpy(row.data(), p.bias, sizeof(float) * p.N);
  if (p.gelu) gelu_span(row.data(), row.data(), p.N);
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < p.N; ++j)
      p.c[i * p.ldc + j] = p.accumulate ? p.c[i * p.ldc + j] + row[j] : row[j];
}

}  // namespace

void finish(const Problem& p, int m, int64_t j, int64_t n, const float* raw, int64_t ld, float* c) {
  float row[64];
  for (int r = 0; r < m; ++r) {
    for (int64_t i = 0; i < n; ++i)
      row[i] = p.alpha * raw[r * ld + i] + (p.bias ? p.bias[j + i] : 0.0f);
    if (p.gelu) gelu_span(row, row, n);
    float* cr = c + r * p.ldc + j;
    if (p.accumulate) {
      for (int64_t i = 0; i < n; ++i) cr[i] += row[i];
    } else {
      std::memcpy(cr, row, static_cast<size_t>(n) * sizeof(float));
    }
  }
}

const Kernels& active_kernels() {
  if (const Kernels* k = kernels_vnni()) return *k;
  if (const Kernels* k = kernels_avx2()) return *k;
  return kernels_portable();
}

void run(const Problem& p) {
  if (p.M <= 0 || p.N <= 0) return;
  if (p.K <= 0) return fill_k0(p);
  const Kernels& ks = active_kernels();
  const int64_t kb = p.K / kBlock;
  std::vector<int8_t> q(static_cast<size_t>(p.M * p.K));
  std::vector<float> d(static_cast<size_t>(p.M * kb));
  std::vector<int32_t> s(static_cast<size_t>(p.M * kb));
  parallel_for(p.M, row_grain(p.K, kGrainElems), [&](int64_t r0, int64_t r1) {
    std::vector<float> col;  // op(a)'s row r when a is used transposed
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = p.a + r * p.lda;
      if (p.trans_a) {
        col.resize(static_cast<size_t>(p.K));
        for (int64_t k = 0; k < p.K; ++k) col[k] = p.a[k * p.lda + r];
        x = col.data();
      }
      ks.quantize(x, p.K, q.data() + r * p.K, d.data() + r * kb, s.data() + r * kb);
    }
  });

  // The CPU check comes before the call: run_tiles is compiled for AVX-512, and under ASan
  // its prologue already poisons its stack's shadow with AVX-512 stores.
  if (p.M >= kTileRows && kernels_vnni() != nullptr && run_tiles(p, q.data(), d.data())) return;

  const size_t row_bytes = static_cast<size_t>(kb) * block_bytes(p.type);
  const int t = p.type == DType::Q8_0 ? kQ8_0 : kQ4_0;
  const int threads = pool_size();
  const bool serial = threads == 1 || p.N * p.K < kSerialValues;
  const int64_t units = (p.N + 15) / 16;  // slices of whole 16-row groups
  const int64_t slices =
      serial ? 1 : std::clamp<int64_t>(int64_t{threads} * kTasksPerThread, 1, units);
  const auto task = [&](int64_t sl) {
    const int64_t j0 = std::min(p.N, units * sl / slices * 16);
    const int64_t j1 = std::min(p.N, units * (sl + 1) / slices * 16);
    float raw[kMaxRows * kColBlock];
    for (int64_t jb = j0; jb < j1; jb += kColBlock) {
      const int64_t n = std::min(kColBlock, j1 - jb);
      const std::byte* w = p.w + static_cast<size_t>(jb) * row_bytes;
      for (int64_t r0 = 0; r0 < p.M; r0 += kMaxRows) {
        const int m = static_cast<int>(std::min<int64_t>(kMaxRows, p.M - r0));
        const Rows rows{q.data() + r0 * p.K, d.data() + r0 * kb, s.data() + r0 * kb, p.K, kb};
        ks.dots[t](m, rows, w, row_bytes, 0, n, raw, kColBlock);
        finish(p, m, jb, n, raw, kColBlock, p.c + r0 * p.ldc);
      }
    }
  };
  if (serial) {
    task(0);
  } else {
    run_tasks(slices, task);
  }
}

}  // namespace forge::cpu::quant
