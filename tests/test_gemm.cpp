// The CPU matmul (packed GEMM + small-m streaming path) against a float64 reference, for every
// flag combination, awkward shapes and every SIMD path this CPU runs; the chunked LM head;
// threaded vs single-threaded; the engine's edge handling (nothing written outside C).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/vec_kernels.h"
#include "forge/forge.h"

using namespace forge;
namespace gemm = forge::cpu::gemm;

namespace {

std::vector<float> uniform(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The SIMD levels this CPU (and FORGE_SIMD) allows, portable first.
std::vector<cpu::SimdLevel> levels() {
  std::vector<cpu::SimdLevel> out;
  for (int l = 0; l <= static_cast<int>(cpu::simd_level()); ++l) {
    const auto level = static_cast<cpu::SimdLevel>(l);
    if (gemm::force_level(level)) out.push_back(level);
  }
  gemm::force_level(std::nullopt);
  return out;
}

// Restores the automatic SIMD level and the thread count when a test ends, even on failure.
struct Restore {
  int threads = num_threads();
  ~Restore() {
    gemm::force_level(std::nullopt);
    set_num_threads(threads);
  }
};

// One matmul case: the stored operands and what the result must be.
struct Case {
  int64_t m, k, n;
  bool trans_a, trans_b, bias, alpha, batch_a, batch_b, cut;
  int64_t batch() const { return batch_a || batch_b ? 3 : 1; }
  std::string str() const {
    return "m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n) +
           (trans_a ? " trans_a" : "") + (trans_b ? " trans_b" : "") + (bias ? " bias" : "") +
           (alpha ? " alpha" : "") + (batch_a ? " batch_a" : "") + (batch_b ? " batch_b" : "") +
           (cut ? " b_rows" : "");
  }
};

// Extra stored rows of b that b_rows cuts off; filled with NaN so any use of them shows.
constexpr int64_t kCutRows = 3;

struct Inputs {
  Tensor a, b, bias;
  MatmulSpec spec;
  std::vector<double> want;   // [batch, m, n]
  std::vector<double> scale;  // |alpha| * sum_k |a_ik b_kj| + |bias_j|, per output element
};

Inputs make_inputs(const Case& c, uint32_t seed) {
  Inputs in;
  const int64_t B = c.batch();
  const int64_t ba = c.batch_a ? B : 1, bb = c.batch_b ? B : 1;
  // Stored layouts: a [K, M] when transposed; b [N, K] when transposed; b_rows cuts the
  // stored rows of b (K rows, or N rows with trans_b).
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_used = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t b_rows = b_used + (c.cut ? kCutRows : 0);
  std::vector<float> av = uniform(ba * a_rows * a_cols, seed);
  std::vector<float> bv = uniform(bb * b_rows * b_cols, seed + 1);
  if (c.cut) {
    for (int64_t bi = 0; bi < bb; ++bi)
      for (int64_t r = b_used; r < b_rows; ++r)
        for (int64_t j = 0; j < b_cols; ++j)
          bv[(bi * b_rows + r) * b_cols + j] = std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<float> biasv = uniform(c.n, seed + 2);
  in.a = c.batch_a ? Tensor::from_vector(av, {B, a_rows, a_cols})
                   : Tensor::from_vector(av, {a_rows, a_cols});
  in.b = c.batch_b ? Tensor::from_vector(bv, {B, b_rows, b_cols})
                   : Tensor::from_vector(bv, {b_rows, b_cols});
  if (c.bias) in.bias = Tensor::from_vector(biasv, {c.n});
  in.spec.trans_a = c.trans_a;
  in.spec.trans_b = c.trans_b;
  in.spec.alpha = c.alpha ? -0.37f : 1.0f;
  in.spec.b_rows = c.cut ? b_used : 0;

  // float64 reference, straight from the definition of op(a), op(b).
  in.want.assign(B * c.m * c.n, 0.0);
  in.scale.assign(B * c.m * c.n, 0.0);
  std::vector<double> opa(c.m * c.k), opb(c.k * c.n);
  for (int64_t bi = 0; bi < B; ++bi) {
    const float* pa = av.data() + (c.batch_a ? bi : 0) * a_rows * a_cols;
    const float* pb = bv.data() + (c.batch_b ? bi : 0) * b_rows * b_cols;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t kk = 0; kk < c.k; ++kk)
        opa[i * c.k + kk] = c.trans_a ? pa[kk * a_cols + i] : pa[i * a_cols + kk];
    for (int64_t kk = 0; kk < c.k; ++kk)
      for (int64_t j = 0; j < c.n; ++j)
        opb[kk * c.n + j] = c.trans_b ? pb[j * b_cols + kk] : pb[kk * b_cols + j];
    for (int64_t i = 0; i < c.m; ++i) {
      double* w = in.want.data() + (bi * c.m + i) * c.n;
      double* s = in.scale.data() + (bi * c.m + i) * c.n;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const double x = opa[i * c.k + kk];
        const double* row = opb.data() + kk * c.n;
        for (int64_t j = 0; j < c.n; ++j) {
          w[j] += x * row[j];
          s[j] += std::abs(x * row[j]);
        }
      }
      const double alpha = in.spec.alpha;
      for (int64_t j = 0; j < c.n; ++j) {
        w[j] = alpha * w[j] + (c.bias ? biasv[j] : 0.0);
        s[j] = std::abs(alpha) * s[j] + (c.bias ? std::abs(biasv[j]) : 0.0);
      }
    }
  }
  return in;
}

// Tolerance rule: f32 accumulation over K products errs by about sqrt(K) * 2^-24 * sum |terms|
// on average and by at most ~K * 2^-24 * sum |terms|; we allow
//   |got - want| <= 1e-4 * max(1, scale / 8),  scale = |alpha| sum_k |a_ik b_kj| + |bias_j|,
// i.e. 1e-4 absolute for small sums and 1.25e-5 relative to the magnitude sum for large ones.
double tolerance(double scale) { return 1e-4 * std::max(1.0, scale / 8.0); }

// Runs the case through the public forge::matmul and checks every element.
void check_case(const Case& c, const Inputs& in, const std::string& where) {
  const Tensor out = matmul(in.a, in.b, in.spec, in.bias);
  const int64_t B = c.batch();
  const std::vector<int64_t> want_dims =
      c.batch_a || c.batch_b ? std::vector<int64_t>{B, c.m, c.n} : std::vector<int64_t>{c.m, c.n};
  ASSERT_EQ(out.shape(), Shape(want_dims)) << where << " " << c.str();
  const std::vector<float> got = out.to_vector<float>();
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - in.want[i]);
    if (!(err <= tolerance(in.scale[i]))) {  // also catches NaN
      if (++bad <= 3)
        ADD_FAILURE() << where << " " << c.str() << ": element " << i << " got " << got[i]
                      << " want " << in.want[i] << " (tolerance " << tolerance(in.scale[i]) << ")";
    }
  }
  EXPECT_EQ(bad, 0) << where << " " << c.str();
}

// Runs one case on every SIMD level this CPU supports.
void check_all_levels(const Case& c, uint32_t seed) {
  const Inputs in = make_inputs(c, seed);
  for (cpu::SimdLevel level : levels()) {
    ASSERT_TRUE(gemm::force_level(level));
    check_case(c, in, cpu::simd_level_name(level));
  }
  gemm::force_level(std::nullopt);
}

Case flags_case(int64_t m, int64_t k, int64_t n, int f) {
  return Case{m,
              k,
              n,
              (f & 1) != 0,
              (f & 2) != 0,
              (f & 4) != 0,
              (f & 8) != 0,
              (f & 16) != 0,
              (f & 32) != 0,
              (f & 64) != 0};
}

}  // namespace

// Every combination of trans_a x trans_b x bias x alpha x batch (none / a / b / both) x b_rows
// on small awkward shapes: both the small-m path (m = 1) and the packed path with edges in
// every direction (17, 33: not multiples of any tile; 64: exact tiles). Each combination
// meets a quarter of the 64 shapes (rotating), each shape 32 combinations.
TEST(Gemm, EveryFlagCombination) {
  Restore restore;
  const int64_t dims[] = {1, 17, 33, 64};
  uint32_t seed = 1;
  for (int f = 0; f < 128; ++f) {
    int shape = 0;
    for (int64_t m : dims)
      for (int64_t k : dims)
        for (int64_t n : dims)
          if ((shape++ + f) % 4 == 0) check_all_levels(flags_case(m, k, n, f), seed++);
  }
}

// All shapes from {1, 17, 33, 64, 785}^3 (785 crosses the depth, row and column blocks), each
// with a different flag combination so that large shapes meet every flag too.
TEST(Gemm, AwkwardShapes) {
  Restore restore;
  const int64_t dims[] = {1, 17, 33, 64, 785};
  int idx = 0;
  for (int64_t m : dims)
    for (int64_t k : dims)
      for (int64_t n : dims) {
        ++idx;
        int f = (idx * 37) % 128;
        // Keep the float64 reference cheap: no batch on the largest products.
        if (m * k * n > 785 * 785 * 64) f &= ~(16 | 32);
        check_all_levels(flags_case(m, k, n, f), 1000 + idx);
      }
}

// The LM-head width (n = 50257 crosses the column blocks many times) with small m and k.
TEST(Gemm, VocabWidth) {
  Restore restore;
  const int64_t n = 50257;
  const int64_t mk[][2] = {{1, 17}, {3, 33}, {5, 64}, {17, 33}};
  int idx = 0;
  for (const auto& s : mk)
    for (int f : {0, 2, 2 | 4 | 8, 1 | 4, 2 | 64, 1 | 2 | 8 | 64})
      check_all_levels(flags_case(s[0], s[1], n, f), 5000 + idx++);
}

// Every row count of the small-m streaming path (m <= gemm::kStreamM, in groups of kSmallM
// rows), and the first ones past
// it, with depths that leave tails in the k loops and widths that leave partial vectors.
TEST(Gemm, EverySmallRowCount) {
  Restore restore;
  int idx = 0;
  for (int64_t m = 1; m <= gemm::kStreamM + 2; ++m)
    for (const auto& kn : {std::pair<int64_t, int64_t>{33, 45}, {301, 70}, {7, 1500}})
      for (int f : {0, 1 | 4, 2 | 8, 1 | 2 | 4 | 8, 2 | 16 | 32 | 64})
        check_all_levels(flags_case(m, kn.first, kn.second, f), 7000 + idx++);
}

// K = 0 gives the bias (or zeros), through the epilogues; the ops layer still calls the kernel.
TEST(Gemm, EmptyInnerDimension) {
  const Tensor a = Tensor::zeros({3, 0});
  const Tensor b = Tensor::zeros({0, 5});
  const Tensor bias = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, {5});
  EXPECT_EQ(matmul(a, b).to_vector<float>(), std::vector<float>(15, 0.0f));
  const std::vector<float> got = matmul(a, b, {}, bias).to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(got[i * 5 + j], j + 1);
  // The epilogues too: gelu(bias), and acc + [gelu](bias).
  MatmulSpec gelu;
  gelu.gelu = true;
  const std::vector<float> g = matmul(a, b, gelu, bias).to_vector<float>();
  Tensor acc = Tensor::full({3, 5}, 0.25f);
  matmul_add_(acc, a, b, gelu, bias);
  const std::vector<float> ga = acc.to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      const double x = j + 1;
      const double want =
          0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(g[i * 5 + j], want, 1e-5);
      EXPECT_NEAR(ga[i * 5 + j], 0.25 + want, 1e-5);
    }
  Tensor acc2 = Tensor::full({3, 5}, 0.25f);
  matmul_add_(acc2, a, b);
  EXPECT_EQ(acc2.to_vector<float>(), std::vector<float>(15, 0.25f));
}

// Every element is computed by one task with a fixed summation order, so the thread count
// changes nothing, bit for bit.
TEST(Gemm, ThreadedEqualsSingleThreaded) {
  Restore restore;
  const Case cases[] = {
      {300, 785, 900, false, false, true, false, false, false, false},
      {130, 300, 257, true, true, false, true, false, false, false},
      {64, 64, 300, false, true, false, true, true, true, true},  // attention-like batch
      {1, 768, 5000, false, false, true, false, false, false, false},
      {1, 64, 700, false, true, false, true, true, true, true},  // decode against a cache
      {3, 500, 2000, true, true, true, false, false, false, false},
  };
  for (const Case& c : cases) {
    const Inputs in = make_inputs(c, 4242);
    set_num_threads(1);
    const std::vector<float> one = matmul(in.a, in.b, in.spec, in.bias).to_vector<float>();
    for (int t : {2, 3, 5}) {
      set_num_threads(t);
      const std::vector<float> many = matmul(in.a, in.b, in.spec, in.bias).to_vector<float>();
      ASSERT_EQ(one, many) << c.str() << " threads=" << t;
    }
    check_case(c, in, "threaded");
  }
}

// The epilogues (gelu, matmul_add_) on every path of the engine: the small-m streaming path
// (m = 1, 3; b and b^T), the packed path with several depth blocks (k = 785) and edge tiles,
// the resident-A path (few rows, many columns), batched and shared b; each SIMD level, one
// and several threads. Against float64: acc + gelu(alpha op(a) op(b) + bias), where
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and |gelu'| <= 1.13.
TEST(Gemm, EpiloguesOnEveryPath) {
  Restore restore;
  const Case cases[] = {
      {1, 785, 70, false, false, true, false, false, false, false},
      {3, 301, 45, true, true, false, true, false, false, false},
      {1, 64, 700, false, true, true, true, true, true, true},  // decode against a cache
      {33, 785, 70, false, false, true, true, false, false, false},
      {29, 100, 3000, false, true, true, false, false, false, false},  // resident A
      {17, 33, 45, true, false, false, false, true, false, false},     // shared b, batched a
      {20, 64, 33, true, true, true, false, true, true, false},
  };
  uint32_t seed = 9000;
  for (const Case& c : cases)
    for (int mode = 1; mode < 4; ++mode) {  // 1: gelu, 2: accumulate, 3: both
      const bool gelu = mode & 1, accumulate = mode & 2;
      Inputs in = make_inputs(c, seed++);
      in.spec.gelu = gelu;
      const std::vector<float> acc0 = uniform(in.want.size(), seed++);
      std::vector<double> want(in.want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        const double x = in.want[i];
        const double g =
            gelu ? 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) : x;
        want[i] = (accumulate ? acc0[i] : 0.0) + g;
      }
      const Shape out_shape = c.batch_a || c.batch_b ? Shape{c.batch(), c.m, c.n} : Shape{c.m, c.n};
      for (cpu::SimdLevel level : levels())
        for (int threads : {1, 3}) {
          ASSERT_TRUE(gemm::force_level(level));
          set_num_threads(threads);
          std::vector<float> got;
          if (accumulate) {
            Tensor acc = Tensor::from_vector(acc0, out_shape);
            matmul_add_(acc, in.a, in.b, in.spec, in.bias);
            got = acc.to_vector<float>();
          } else {
            got = matmul(in.a, in.b, in.spec, in.bias).to_vector<float>();
          }
          ASSERT_EQ(got.size(), want.size());
          int bad = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double tol = 1.2 * tolerance(in.scale[i]);
            if (!(std::abs(got[i] - want[i]) <= tol) && ++bad <= 3)
              ADD_FAILURE() << c.str() << " mode=" << mode << " " << cpu::simd_level_name(level)
                            << " threads=" << threads << ": element " << i << " got " << got[i]
                            << " want " << want[i];
          }
          EXPECT_EQ(bad, 0) << c.str() << " mode=" << mode;
        }
    }
}

// The engine writes exactly C: a wider row stride (ldc > N, as in the chunked LM head) and
// sentinels around C stay untouched on every path and level.
TEST(Gemm, WritesOnlyC) {
  Restore restore;
  const float sentinel = 12345.0f;
  for (cpu::SimdLevel level : levels()) {
    ASSERT_TRUE(gemm::force_level(level));
    for (int64_t M : {1, 3, 8, 29}) {
      for (bool tb : {false, true}) {
        // N = 57: the last column tile is partial but wider than half a tile for every
        // kernel set; K = 300 spans two depth blocks (the accumulating store).
        const int64_t N = 57, K = 300, ldc = N + 7;
        const std::vector<float> a = uniform(M * K, 9), b = uniform(K * N, 10);
        std::vector<float> c((M + 1) * ldc, sentinel);
        gemm::Problem p;
        p.M = M;
        p.N = N;
        p.K = K;
        p.a = a.data();
        p.lda = K;
        p.b = b.data();
        p.ldb = tb ? K : N;
        p.trans_b = tb;
        p.c = c.data() + 2;  // C starts 2 columns in, like a column block of a wider output
        p.ldc = ldc;
        gemm::run(p);
        for (int64_t i = 0; i < M + 1; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const bool inside = i < M && j >= 2 && j < 2 + N;
            const float v = c[i * ldc + j];
            if (inside) {
              double want = 0;
              for (int64_t k = 0; k < K; ++k)
                want += double{a[i * K + k]} * (tb ? b[(j - 2) * K + k] : b[k * N + j - 2]);
              ASSERT_NEAR(v, want, 1e-4 * std::max(1.0, std::abs(want)))
                  << cpu::simd_level_name(level) << " M=" << M << " i=" << i << " j=" << j;
            } else {
              ASSERT_EQ(v, sentinel) << cpu::simd_level_name(level) << " M=" << M << " tb=" << tb
                                     << " wrote outside C at i=" << i << " j=" << j;
            }
          }
      }
    }
  }
}

// Invalid input is rejected by the op with a message naming it (validation lives in
// src/ops/matmul.cpp; this guards the contract the kernels rely on).
TEST(Gemm, RejectsInvalidInput) {
  const Tensor a = Tensor::zeros({2, 3});
  const Tensor b = Tensor::zeros({4, 5});
  try {
    matmul(a, b);
    FAIL() << "inner dimension mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("matmul", 0), 0u) << e.what();
  }
  MatmulSpec spec;
  spec.b_rows = 5;
  EXPECT_THROW(matmul(Tensor::zeros({2, 5}), Tensor::zeros({4, 5}), spec), Error);
  EXPECT_THROW(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})), Error);
  EXPECT_THROW(matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 4}), {}, Tensor::zeros({3})), Error);
}

// The CI entries cpu_simd_avx2 and cpu_simd_portable rerun the CPU kernel tests and the op
// harness with FORGE_SIMD capping the level: the cap must have taken effect (or the CPU
// lacks the level, which is a skip, not a pass), in the level the span kernels see too.
TEST(Simd, ForgeSimdSetsTheLevelEveryKernelUses) {
  const char* want = std::getenv("FORGE_SIMD");
  const forge::cpu::SimdLevel level = forge::cpu::simd_level();
  EXPECT_EQ(forge::cpu::use_avx512(), level == forge::cpu::SimdLevel::Avx512);
  EXPECT_EQ(forge::list_devices().front().simd, forge::cpu::simd_level_name(level));
  if (want == nullptr || *want == '\0') GTEST_SKIP() << "FORGE_SIMD is not set";
  if (std::string(want) != forge::cpu::simd_level_name(level))
    GTEST_SKIP() << "FORGE_SIMD=" << want << " but this CPU only has "
                 << forge::cpu::simd_level_name(level);
  SUCCEED() << "running at " << want;
}
