// The GEMM driver: picks the kernel set, splits a product into tasks for the thread pool and
// runs the Goto loops (jc -> pc -> ic) of each task over per-thread packing buffers.
//
// Threading. A product is cut into tasks, each a rectangle of C (and a batch item), so that
// one design serves both a single big GEMM (cut over M and N) and many small batched ones
// (attention: one task per batch item, cut further when there are fewer items than
// threads). Each task packs its own A and B blocks into thread-local buffers: no barrier is
// needed, and the pool's atomic task counter balances uneven progress (other processes on
// the cores). Cutting C repacks A once per N-part and B once per M-part; the cut is chosen
// to minimize that extra packing.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec_kernels.h"

namespace forge::cpu::gemm {
namespace {

// A grow-only, 64-byte aligned float buffer owned by one thread: packing reuses it, so a
// steady stream of products allocates nothing. Sizes are bounded by the blocking constants.
class Scratch {
 public:
  float* get(size_t floats) {
    if (floats > cap_) {
      const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, bytes);
      if (!p) throw std::bad_alloc();
      buf_.reset(static_cast<float*>(p));
      cap_ = bytes / sizeof(float);
    }
    return buf_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> buf_;
  size_t cap_ = 0;
};

thread_local Scratch t_pack_a;
thread_local Scratch t_pack_b;
thread_local Scratch t_rows;  // small-m path: op(A) rows made contiguous when trans_a
thread_local Scratch t_epi;   // small-m path with accumulate: the product before it is added
thread_local Scratch t_wide;  // 16-bit B: rows widened to f32 before packing or streaming

std::atomic<int> g_forced{-1};  // a forced SimdLevel, or -1

const Kernels* kernels_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512: return kernels_avx512();
    case SimdLevel::Avx2: return kernels_avx2();
    case SimdLevel::Portable: return &kernels_portable();
  }
  return nullptr;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Work below which a product runs on the calling thread alone: a parallel region costs a few
// microseconds (more when the cores are busy), ~20 us of packed GEMM or ~10 us of streaming.
constexpr double kSerialFlops = 2.0e6;
constexpr int64_t kSerialStreamFloats = 32 * 1024;
// Aim for this many tasks per thread when the work allows: lets the atomic task counter
// absorb uneven progress without cutting tasks so small that packing dominates.
constexpr int kTasksPerThread = 2;
// Smallest task of the packed path (flops): packing and task dispatch stay a few percent.
constexpr double kMinTaskFlops = 4.0e6;
// Largest packed op(A) a task keeps for all its column blocks (floats, per thread).
constexpr int64_t kResidentFloats = 256 * 1024;
// Smallest slice of B a small-m task streams (floats): a page or more per B row segment.
constexpr int64_t kMinSliceFloats = 16384;

// Runs fn(t) for t in [0, n): on the pool, or inline when the work is too small to share.
template <typename F>
void run_all(int64_t n, const F& fn, bool serial) {
  if (serial) {
    for (int64_t t = 0; t < n; ++t) fn(t);
  } else {
    run_tasks(n, fn);
  }
}

// The epilogue of rows [0, m) x columns [0, n) of a product: y = gelu?(v) stored at c, or
// added to c with accumulate. v may be c itself (not with accumulate).
void finish_rows(const Problem& p, int64_t m, int64_t n, float* v, int64_t ldv, float* c,
                 int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) {
    float* vr = v + r * ldv;
    float* cr = c + r * ldc;
    if (p.gelu) gelu_span(vr, vr, n);
    if (p.accumulate)
      for (int64_t j = 0; j < n; ++j) cr[j] += vr[j];
  }
}

// K = 0: every row is [acc +] [gelu](bias or zeros).
void fill_k0(const Problem& p) {
  std::vector<float> row(static_cast<size_t>(p.N), 0.0f);
  if (p.bias) std::memcpy(row.data(), p.bias, sizeof(float) * p.N);
  if (p.gelu) gelu_span(row.data(), row.data(), p.N);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    for (int64_t i = 0; i < p.M; ++i) {
      float* c = p.c + bi * p.stride_c + i * p.ldc;
      for (int64_t j = 0; j < p.N; ++j) c[j] = p.accumulate ? c[j] + row[j] : row[j];
    }
  }
}

// ---- small m: stream B without packing ---------------------------------------------------

// Rows of widened B per step of rows_t_wide (a few KiB to a few tens of KiB: stays in L1/L2).
constexpr int64_t kWideRows = 8;

// rows_t over a 16-bit B [N, K] for columns [j0, j1): the kernel set's own (which widens in
// registers), else kWideRows rows at a time widened into a buffer and run through rows_t.
void rows_t_any(const Kernels& ks, const Problem& p, int m, const float* a, int64_t lda,
                const uint16_t* b, int64_t j0, int64_t j1, float* c, int64_t ldc,
                const float* bias) {
  const int t = p.b_type == BType::bf16 ? 1 : 0;
  if (ks.rows_t16[t])
    return ks.rows_t16[t](m, p.K, a, lda, b, p.ldb, j0, j1, c, ldc, p.alpha, bias);
  float* w = t_wide.get(static_cast<size_t>(kWideRows * p.K));
  for (int64_t j = j0; j < j1; j += kWideRows) {
    const int64_t n = std::min(kWideRows, j1 - j);
    for (int64_t r = 0; r < n; ++r) widen(p.b_type, b + (j + r) * p.ldb, p.K, w + r * p.K);
    ks.rows_t(m, p.K, a, lda, w, p.K, 0, n, c + j, ldc, p.alpha, bias ? bias + j : nullptr);
  }
}

// The streaming product of m <= kSmallM rows a [m, K] (row stride lda) and one batch item's
// f32 B at b (p.b16 for a 16-bit one) into C's rows at c, columns [j0, j1), with p's bias
// and epilogue.
void small_rows(const Kernels& ks, const Problem& p, int m, const float* a, int64_t lda,
                const float* b, float* c, int64_t j0, int64_t j1) {
  if (p.b_type != BType::f32) {  // [N, K], shared by the batch (gemm.h)
    if (!p.accumulate) {
      rows_t_any(ks, p, m, a, lda, p.b16, j0, j1, c, p.ldc, p.bias);
      if (p.gelu) finish_rows(p, m, j1 - j0, c + j0, p.ldc, c + j0, p.ldc);
      return;
    }
    const int64_t w = j1 - j0;
    float* v = t_epi.get(static_cast<size_t>(m * w));
    rows_t_any(ks, p, m, a, lda, p.b16 + j0 * p.ldb, 0, w, v, w, p.bias ? p.bias + j0 : nullptr);
    finish_rows(p, m, w, v, w, c + j0, p.ldc);
    return;
  }
  if (!p.accumulate) {
    if (p.trans_b)
      ks.rows_t(m, p.K, a, lda, b, p.ldb, j0, j1, c, p.ldc, p.alpha, p.bias);
    else
      ks.rows_n(m, p.K, a, lda, b, p.ldb, j0, j1, c, p.ldc, p.alpha, p.bias);
    if (p.gelu) finish_rows(p, m, j1 - j0, c + j0, p.ldc, c + j0, p.ldc);
    return;
  }
  // Accumulate: the slice's product goes to a scratch [m, w] first (the kernels store, they
  // do not add); b and bias are shifted so that column j0 is the scratch's column 0.
  const int64_t w = j1 - j0;
  float* v = t_epi.get(static_cast<size_t>(m * w));
  const float* bias = p.bias ? p.bias + j0 : nullptr;
  if (p.trans_b)
    ks.rows_t(m, p.K, a, lda, b + j0 * p.ldb, p.ldb, 0, w, v, w, p.alpha, bias);
  else
    ks.rows_n(m, p.K, a, lda, b + j0, p.ldb, 0, w, v, w, p.alpha, bias);
  finish_rows(p, m, w, v, w, c + j0, p.ldc);
}

void run_small(const Kernels& ks, const Problem& p) {
  const int threads = pool_size();
  // Slices per batch item: enough tasks for every thread, each streaming a decent slice.
  const bool serial = threads == 1 || p.batch * p.N * p.K < kSerialStreamFloats;
  int64_t slices = 1;
  if (!serial) {
    const int64_t want = ceil_div(int64_t{threads} * kTasksPerThread, p.batch);
    const int64_t max_by_size = std::max<int64_t>(1, p.N * p.K / kMinSliceFloats);
    const int64_t max_by_cols = std::max<int64_t>(1, p.N / 16);
    slices = std::clamp<int64_t>(want, 1, std::min(max_by_size, max_by_cols));
  }
  // Slice boundaries fall on multiples of 16 columns (whole cache lines of a B row).
  const int64_t units = ceil_div(p.N, 16);
  const auto task = [&](int64_t t) {
    const int64_t bi = t / slices, s = t % slices;
    const int64_t j0 = std::min(p.N, units * s / slices * 16);
    const int64_t j1 = std::min(p.N, units * (s + 1) / slices * 16);
    if (j0 >= j1) return;
    const float* a = p.a + bi * p.stride_a;
    int64_t lda = p.lda;
    if (p.trans_a) {  // op(A) rows are strided columns of a: gather them once, [M, K]
      float* rows = t_rows.get(static_cast<size_t>(p.M * p.K));
      for (int64_t k = 0; k < p.K; ++k)
        for (int64_t r = 0; r < p.M; ++r) rows[r * p.K + k] = a[k * p.lda + r];
      a = rows;
      lda = p.K;
    }
    const float* b = p.b_type == BType::f32 ? p.b + bi * p.stride_b : nullptr;
    for (int64_t r0 = 0; r0 < p.M; r0 += kSmallM)  // in row groups the kernels take
      small_rows(ks, p, static_cast<int>(std::min<int64_t>(kSmallM, p.M - r0)), a + r0 * lda, lda,
                 b, p.c + bi * p.stride_c + r0 * p.ldc, j0, j1);
  };
  run_all(p.batch * slices, task, serial);
}

// ---- the packed path -----------------------------------------------------------------------

// Packs op(B)[k0 : k0+kc, j0 : j0+nc] (Kernels::pack_b); a 16-bit B [N, K] is widened into a
// buffer [nc, kc] first and packed from there.
void pack_b_any(const Kernels& ks, const Problem& p, const float* b, int64_t k0, int64_t j0,
                int64_t nc, int64_t kc, float* dst) {
  if (p.b_type == BType::f32) return ks.pack_b(b, p.ldb, p.trans_b, k0, j0, nc, kc, dst);
  float* w = t_wide.get(static_cast<size_t>(nc * kc));
  for (int64_t r = 0; r < nc; ++r) widen(p.b_type, p.b16 + (j0 + r) * p.ldb + k0, kc, w + r * kc);
  ks.pack_b(w, kc, true, 0, 0, nc, kc, dst);
}

// One task: rows [i0, i1) x columns [j0, j1) of C for batch item bi.
void run_block(const Kernels& ks, const Problem& p, int64_t bi, int64_t i0, int64_t i1, int64_t j0,
               int64_t j1) {
  const float* a = p.a + bi * p.stride_a;
  const float* b = p.b_type == BType::f32 ? p.b + bi * p.stride_b : nullptr;
  float* c = p.c + bi * p.stride_c;
  float* pb = t_pack_b.get(static_cast<size_t>(ks.nc) * ks.kc);
  const int64_t rows = i1 - i0;
  const int64_t rows_pad = ceil_div(rows, ks.mr) * ks.mr;
  if (j1 - j0 > ks.nc && rows_pad * p.K <= kResidentFloats) {
    // Few rows, many column blocks (the LM head, short sequences): pack all of this task's
    // op(A) once, depth block pc at pa + pc * rows_pad, instead of once per column block.
    float* pa = t_pack_a.get(static_cast<size_t>(rows_pad * p.K));
    for (int64_t pc = 0; pc < p.K; pc += ks.kc)
      ks.pack_a(a, p.lda, p.trans_a, i0, pc, rows, std::min<int64_t>(ks.kc, p.K - pc),
                pa + pc * rows_pad);
    for (int64_t jc = j0; jc < j1; jc += ks.nc) {
      const int64_t nc = std::min<int64_t>(ks.nc, j1 - jc);
      for (int64_t pc = 0; pc < p.K; pc += ks.kc) {
        const int64_t kc = std::min<int64_t>(ks.kc, p.K - pc);
        pack_b_any(ks, p, b, pc, jc, nc, kc, pb);
        const float* bias = pc == 0 && p.bias ? p.bias + jc : nullptr;
        ks.macro(rows, nc, kc, pa + pc * rows_pad, pb, c + i0 * p.ldc + jc, p.ldc, p.alpha, bias,
                 pc > 0 || p.accumulate);
      }
      if (p.gelu) finish_rows(p, rows, nc, c + i0 * p.ldc + jc, p.ldc, c + i0 * p.ldc + jc, p.ldc);
    }
    return;
  }
  float* pa = t_pack_a.get(static_cast<size_t>(ks.mc) * ks.kc);
  for (int64_t jc = j0; jc < j1; jc += ks.nc) {
    const int64_t nc = std::min<int64_t>(ks.nc, j1 - jc);
    for (int64_t pc = 0; pc < p.K; pc += ks.kc) {
      const int64_t kc = std::min<int64_t>(ks.kc, p.K - pc);
      pack_b_any(ks, p, b, pc, jc, nc, kc, pb);
      // The first depth block stores alpha * AB + bias (adds it to C with accumulate),
      // later ones accumulate onto it; the gelu epilogue follows the last one.
      const bool first = pc == 0, last = pc + kc >= p.K;
      const float* bias = first && p.bias ? p.bias + jc : nullptr;
      for (int64_t ic = i0; ic < i1; ic += ks.mc) {
        const int64_t mc = std::min<int64_t>(ks.mc, i1 - ic);
        float* ct = c + ic * p.ldc + jc;
        ks.pack_a(a, p.lda, p.trans_a, ic, pc, mc, kc, pa);
        ks.macro(mc, nc, kc, pa, pb, ct, p.ldc, p.alpha, bias, !first || p.accumulate);
        if (last && p.gelu) finish_rows(p, mc, nc, ct, p.ldc, ct, p.ldc);
      }
    }
  }
}

void run_packed(const Kernels& ks, const Problem& p) {
  const int threads = pool_size();
  const int64_t tiles_m = ceil_div(p.M, ks.mr);
  const int64_t tiles_n = ceil_div(p.N, ks.nr);
  const double flops = 2.0 * p.batch * p.M * p.N * p.K;
  const bool serial = threads == 1 || flops < kSerialFlops;
  int64_t pm = 1, pn = 1;
  if (!serial) {
    const int64_t by_work = std::max<int64_t>(1, static_cast<int64_t>(flops / kMinTaskFlops));
    const int64_t want = std::min<int64_t>(int64_t{threads} * kTasksPerThread, by_work);
    const int64_t parts = ceil_div(want, p.batch);  // cuts of each batch item
    if (parts > 1) {
      // Cutting into pm x pn repacks A pn times and B pm times: among the cuts that give
      // enough parts (else the most parts), take the one that packs least.
      double best_cost = 0;
      bool have = false;
      for (int64_t n_parts = 1; n_parts <= std::min(parts, tiles_n); ++n_parts) {
        const int64_t m_parts = std::min(ceil_div(parts, n_parts), tiles_m);
        const double cost = static_cast<double>(n_parts) * p.M + static_cast<double>(m_parts) * p.N;
        const int64_t got = n_parts * m_parts, had = pm * pn;
        const bool better = !have || (got >= parts && had < parts) ||
                            (got < parts && had < parts && got > had) ||
                            (got >= parts && had >= parts && cost < best_cost);
        if (better) {
          have = true;
          best_cost = cost;
          pm = m_parts;
          pn = n_parts;
        }
      }
    }
  }
  const int64_t per_item = pm * pn;
  const auto task = [&](int64_t t) {
    const int64_t bi = t / per_item, r = t % per_item;
    const int64_t im = r / pn, in = r % pn;
    const int64_t i0 = std::min(p.M, tiles_m * im / pm * ks.mr);
    const int64_t i1 = std::min(p.M, tiles_m * (im + 1) / pm * ks.mr);
    const int64_t j0 = std::min(p.N, tiles_n * in / pn * ks.nr);
    const int64_t j1 = std::min(p.N, tiles_n * (in + 1) / pn * ks.nr);
    if (i0 < i1 && j0 < j1) run_block(ks, p, bi, i0, i1, j0, j1);
  };
  run_all(p.batch * per_item, task, serial);
}

}  // namespace

const Kernels& active_kernels() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) {
    if (const Kernels* k = kernels_for(static_cast<SimdLevel>(forced))) return *k;
  }
  for (int l = static_cast<int>(simd_level()); l >= 0; --l)
    if (const Kernels* k = kernels_for(static_cast<SimdLevel>(l))) return *k;
  return kernels_portable();
}

bool force_level(std::optional<SimdLevel> level) {
  if (!level) {
    g_forced.store(-1);
    return true;
  }
  if (static_cast<int>(*level) > static_cast<int>(simd_level()) || !kernels_for(*level))
    return false;
  g_forced.store(static_cast<int>(*level));
  return true;
}

void run(const Problem& in) {
  if (in.batch <= 0 || in.M <= 0 || in.N <= 0) return;
  if (in.K <= 0) {
    fill_k0(in);
    return;
  }
  Problem p = in;
  // A shared B over a batch of stacked, untransposed A rows is one tall product.
  if (p.batch > 1 && p.stride_b == 0 && !p.trans_a && p.stride_a == p.M * p.lda &&
      p.stride_c == p.M * p.ldc) {
    p.M *= p.batch;
    p.batch = 1;
  }
  const Kernels& ks = active_kernels();
  if (p.M <= kStreamM) {
    run_small(ks, p);
  } else if (p.gelu && p.accumulate) {
    // C += gelu(product): the packed path keeps partial sums in C until the last depth
    // block, which leaves no place for the accumulator. No model needs this combination, so
    // it takes the simple way: the product into a temporary, then one pass adds it.
    std::vector<float> tmp(static_cast<size_t>(p.batch * p.M * p.N));
    Problem q = p;
    q.c = tmp.data();
    q.ldc = p.N;
    q.stride_c = p.M * p.N;
    q.accumulate = false;
    run_packed(ks, q);
    parallel_for(p.batch * p.M, row_grain(p.N, kGrainElems), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* v = tmp.data() + r * p.N;
        float* c = p.c + (r / p.M) * p.stride_c + (r % p.M) * p.ldc;
        for (int64_t j = 0; j < p.N; ++j) c[j] += v[j];
      }
    });
  } else {
    run_packed(ks, p);
  }
}

}  // namespace forge::cpu::gemm
