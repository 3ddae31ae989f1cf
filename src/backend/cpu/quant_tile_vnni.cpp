// The AVX-512 VNNI tile kernel of the quantized products (quant.h), for many activation rows
// (prefill). The activation rows, already rounded to int8 blocks, are packed in groups of 16:
// for each block and each run of 4 values (a quad), one zmm holds the 16 rows' 4 bytes, as
// unsigned bytes (q + 128). Each weight column's quad is broadcast to all 16 lanes, so one
// vpdpbusd adds 4 products to 16 rows of one column: the weights are read as the file stores
// them (signed int8, no repacking) and a tile of 32 rows x 6 columns keeps 12 integer and 12
// float accumulators in registers. The +128 of the activations adds 128 x the weight block's
// sum, which the integer accumulator starts without. Q4_0 weights are first widened to int8
// blocks (nibble - 8) once per slice of columns, so both dtypes run the same kernel.
#include "backend/cpu/quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)

#if defined(__GNUC__) && !defined(__clang__)  // GCC 12's intrinsics headers
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace forge::cpu::quant {
namespace {

constexpr int kGroup = 16;         // activation rows per zmm
constexpr int kCols = 6;           // weight columns per tile
constexpr int kTilesPerChunk = 8;  // tiles whose results are finished together
constexpr int64_t kChunk = int64_t{kCols} * kTilesPerChunk;
constexpr int kTasksPerThread = 2;
// A group's block: 8 quads x 16 rows x 4 bytes.
constexpr size_t kGroupBlockBytes = 8 * kGroup * 4;

// The activation rows packed (layout above): group g's block b at q + (g * kb + b) * 512, its
// 16 rows' scales at d + (g * kb + b) * 16. Rows past M are zeros with scale 0.
struct PackedRows {
  std::vector<uint8_t> q;
  std::vector<float> d;
  int64_t groups = 0, kb = 0;
};

void pack_rows(const int8_t* q, const float* d, int64_t M, int64_t K, PackedRows& pk) {
  const int64_t kb = K / kBlock;
  pk.kb = kb;
  pk.groups = (M + kGroup - 1) / kGroup;
  pk.q.resize(static_cast<size_t>(pk.groups * kb) * kGroupBlockBytes);
  pk.d.resize(static_cast<size_t>(pk.groups * kb * kGroup));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  parallel_for(pk.groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * kGroup;
      const int rows = static_cast<int>(std::min<int64_t>(kGroup, M - r0));
      // Lane i reads row r0 + i (a row past M reads row r0 and is masked to zero after).
      alignas(64) int32_t idx[kGroup];
      for (int i = 0; i < kGroup; ++i) idx[i] = static_cast<int32_t>((i < rows ? i : 0) * K);
      const __m512i vidx = _mm512_load_si512(idx);
      const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1u);
      for (int64_t b = 0; b < kb; ++b) {
        uint8_t* dst = pk.q.data() + static_cast<size_t>(g * kb + b) * kGroupBlockBytes;
        const int8_t* src = q + r0 * K + b * kBlock;
        for (int k4 = 0; k4 < 8; ++k4) {
          const __m512i v = _mm512_i32gather_epi32(vidx, src + 4 * k4, 1);
          // Rows past M: bytes 0x80, i.e. zeros once unsigned.
          _mm512_storeu_si512(dst + k4 * 64, _mm512_mask_xor_epi32(flip, live, v, flip));
        }
        float* dd = pk.d.data() + (g * kb + b) * kGroup;
        for (int i = 0; i < kGroup; ++i) dd[i] = i < rows ? d[(r0 + i) * kb + b] : 0.0f;
      }
    }
  });
}

// A slice of weight columns made ready for tiles: per column, a pointer to its first block's
// 32 int8 values (blocks `stride` bytes apart), and per tile t, block b and column c of the
// tile the f32 scale and the start of the integer accumulator (-128 x the block's sum) at
// [(t * kb + b) * kCols + c]. A tile's columns past the slice repeat its last column.
struct Columns {
  std::vector<const int8_t*> base;
  size_t stride = 0;
  std::vector<float> scale;
  std::vector<int32_t> init;
  std::vector<int8_t> widened;  // Q4_0's blocks as int8, 32 bytes per block
};
thread_local Columns t_cols;

float f16_at(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The sum of 32 int8 values.
int32_t block_sum(const int8_t* v) {
  const __m256i x = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)),
                                     _mm256_set1_epi8(static_cast<char>(0x80)));
  const __m256i s = _mm256_sad_epu8(x, _mm256_setzero_si256());  // 4 sums of (v + 128)
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

void prepare_columns(const Problem& p, int64_t j0, int64_t j1, Columns& cs) {
  const int64_t kb = p.K / kBlock;
  const int64_t n = j1 - j0;
  const int64_t tiles = (n + kCols - 1) / kCols;
  const bool q8 = p.type == DType::Q8_0;
  const size_t bb = q8 ? 34 : 18;
  const size_t row_bytes = static_cast<size_t>(kb) * bb;
  cs.base.resize(static_cast<size_t>(n));
  cs.scale.resize(static_cast<size_t>(tiles * kb * kCols));
  cs.init.resize(cs.scale.size());
  if (q8) {
    cs.stride = bb;
    for (int64_t c = 0; c < n; ++c)
      cs.base[c] =
          reinterpret_cast<const int8_t*>(p.w + static_cast<size_t>(j0 + c) * row_bytes + 2);
  } else {
    cs.stride = kBlock;
    cs.widened.resize(static_cast<size_t>(n * kb * kBlock));
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int64_t c = 0; c < n; ++c) {
      const std::byte* src = p.w + static_cast<size_t>(j0 + c) * row_bytes;
      int8_t* dst = cs.widened.data() + c * kb * kBlock;
      cs.base[c] = dst;
      for (int64_t b = 0; b < kb; ++b) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b * bb + 2));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, low), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), low), eight);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b * kBlock), lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b * kBlock + 16), hi);
      }
    }
  }
  for (int64_t t = 0; t < tiles; ++t)
    for (int c = 0; c < kCols; ++c) {
      const int64_t col = std::min(t * kCols + c, n - 1);
      const std::byte* row = p.w + static_cast<size_t>(j0 + col) * row_bytes;
      for (int64_t b = 0; b < kb; ++b) {
        const size_t at = static_cast<size_t>((t * kb + b) * kCols + c);
        cs.scale[at] = f16_at(row + b * bb);
        cs.init[at] = -128 * block_sum(cs.base[col] + b * cs.stride);
      }
    }
}

// out[c * 16V + 16v + i] = sum over blocks of (dw * d) * dot for row 16v + i of the V groups
// and column c of the tile.
template <int V>
void tile(const uint8_t* const* aq, const float* const* ad, int64_t kb, const int8_t* const* w,
          size_t stride, const float* scale, const int32_t* init, float* out) {
  __m512 f[V][kCols];
#pragma GCC unroll 6
  for (int c = 0; c < kCols; ++c)
    for (int v = 0; v < V; ++v) f[v][c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < kb; ++b) {
    const size_t off = static_cast<size_t>(b) * stride;
    __m512i acc[V][kCols];
#pragma GCC unroll 6
    for (int c = 0; c < kCols; ++c)
      for (int v = 0; v < V; ++v) acc[v][c] = _mm512_set1_epi32(init[b * kCols + c]);
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      __m512i a[V];
      for (int v = 0; v < V; ++v)
        a[v] = _mm512_loadu_si512(aq[v] + static_cast<size_t>(b) * kGroupBlockBytes + k4 * 64);
#pragma GCC unroll 6
      for (int c = 0; c < kCols; ++c) {
        int32_t q4;
        std::memcpy(&q4, w[c] + off + 4 * k4, 4);
        const __m512i wq = _mm512_set1_epi32(q4);
        for (int v = 0; v < V; ++v) acc[v][c] = _mm512_dpbusd_epi32(acc[v][c], a[v], wq);
      }
    }
    for (int v = 0; v < V; ++v) {
      const __m512 da = _mm512_loadu_ps(ad[v] + b * kGroup);
#pragma GCC unroll 6
      for (int c = 0; c < kCols; ++c)
        f[v][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[v][c]),
                                  _mm512_mul_ps(_mm512_set1_ps(scale[b * kCols + c]), da), f[v][c]);
    }
  }
#pragma GCC unroll 6
  for (int c = 0; c < kCols; ++c)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + c * kGroup * V + v * kGroup, f[v][c]);
}

}  // namespace

bool run_tiles(const Problem& p, const int8_t* q, const float* d) {
  if (!kernels_vnni()) return false;
  PackedRows pk;
  pack_rows(q, d, p.M, p.K, pk);
  const int64_t kb = pk.kb;
  const int threads = pool_size();
  const int64_t units = (p.N + kCols - 1) / kCols;  // slices of whole tiles
  const int64_t slices = std::clamp<int64_t>(int64_t{threads} * kTasksPerThread, 1, units);
  const auto task = [&](int64_t sl) {
    const int64_t j0 = std::min(p.N, units * sl / slices * kCols);
    const int64_t j1 = std::min(p.N, units * (sl + 1) / slices * kCols);
    if (j0 >= j1) return;
    Columns& cs = t_cols;
    prepare_columns(p, j0, j1, cs);
    alignas(64) float res[kCols * 2 * kGroup];
    float raw[2 * kGroup * kChunk];  // [row][column of the chunk]
    for (int64_t jc = j0; jc < j1; jc += kChunk) {
      const int64_t n = std::min(kChunk, j1 - jc);
      for (int64_t g = 0; g < pk.groups; g += 2) {
        const int V = g + 1 < pk.groups ? 2 : 1;
        const int m = static_cast<int>(std::min<int64_t>(int64_t{V} * kGroup, p.M - g * kGroup));
        const uint8_t* aq[2];
        const float* ad[2];
        for (int v = 0; v < V; ++v) {
          aq[v] = pk.q.data() + static_cast<size_t>((g + v) * kb) * kGroupBlockBytes;
          ad[v] = pk.d.data() + (g + v) * kb * kGroup;
        }
        for (int64_t t0 = 0; t0 < n; t0 += kCols) {
          const int64_t t = (jc - j0 + t0) / kCols;  // the tile's index in the slice
          const int nc = static_cast<int>(std::min<int64_t>(kCols, n - t0));
          const int8_t* w[kCols];
          for (int c = 0; c < kCols; ++c)
            w[c] = cs.base[static_cast<size_t>(jc - j0 + t0 + std::min(c, nc - 1))];
          const float* sc = cs.scale.data() + t * kb * kCols;
          const int32_t* in = cs.init.data() + t * kb * kCols;
          if (V == 2) {
            tile<2>(aq, ad, kb, w, cs.stride, sc, in, res);
          } else {
            tile<1>(aq, ad, kb, w, cs.stride, sc, in, res);
          }
          for (int c = 0; c < nc; ++c)
            for (int r = 0; r < m; ++r) raw[r * kChunk + t0 + c] = res[c * V * kGroup + r];
        }
        finish(p, m, jc, n, raw, kChunk, p.c + g * kGroup * p.ldc);
      }
    }
  };
  run_tasks(slices, task);
  return true;
}

}  // namespace forge::cpu::quant

#else

namespace forge::cpu::quant {
bool run_tiles(const Problem&, const int8_t*, const float*) { return false; }
}  // namespace forge::cpu::quant

#endif
