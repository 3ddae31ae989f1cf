// Tensor-core tile products of the attention kernels under precision bf16 and tf32 (the _bf16
// and _tf32 twins of attention_tiled64.cu and attention_tiled_bwd.cu): 64 x 64 x 64 products of
// fp32 shared tiles as mma.sync, the sums fp32 and the operands rounded as they are read:
//   FORGE_MMA_BF16  m16n8k16, bf16 operands (nearest, ties to even, as io/half.h rounds);
//   FORGE_MMA_TF32  m16n8k8, tf32 operands (nearest, ties away from zero: cvt.rna, 10 bits of
//                   mantissa, as cuBLAS's TF32 products keep).
// FORGE_MMA_NONE names the fp32 kernels (CUDA-core FMAs) in the templates that take a mode.
//
// Warp w (of 8; 256 threads) owns the 16 x 32 block of every 64 x 64 product at rows 16 (w & 3)
// and columns 32 (w >> 2); lane (g, q) = (lane / 4, lane % 4) holds, for the block's n-tile nt
// (columns 8 nt .. 8 nt + 7), rows g and g + 8 at columns 2q and 2q + 1 (mma's m16n8
// accumulator): acc[nt][0..1] and acc[nt][2..3].

#define FORGE_MMA_NONE 0
#define FORGE_MMA_BF16 1
#define FORGE_MMA_TF32 2

// Two floats rounded to bf16 in one word, `lo` (the element of lower index) in the low half.
static __device__ __forceinline__ u32 forge_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// A float rounded to tf32 (its low 13 bits zero).
static __device__ __forceinline__ u32 forge_tf32(float x) {
  u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// d += A B for one tile of MMA's operands. FORGE_MMA_BF16: 16 x 8 x 16, a0..a3 the A
// fragment (rows g, g + 8 at k 2q, 2q + 1, then the same rows at k + 8), b0, b1 the B
// fragment (column g at k 2q, 2q + 1, then + 8), two bf16 a word. FORGE_MMA_TF32: 16 x 8 x 8,
// a0..a3 rows g, g + 8 at k q, then at k q + 4; b0, b1 column g at k q, then q + 4.
template <int MMA>
static __device__ __forceinline__ void forge_mma(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3,
                                                 u32 b0, u32 b1) {
  if constexpr (MMA == FORGE_MMA_TF32)
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc += the warp's 16 x 32 block of A B summed over k < 64, where A(m, k) = a[m * AR + k * AC]
// and B(k, n) = b[k * BR + n * BC] are fp32 shared tiles (see the top for acc's layout), with
// MMA's operands (FORGE_MMA_BF16 or FORGE_MMA_TF32).
template <int AR, int AC, int BR, int BC, int MMA>
static __device__ __forceinline__ void forge_tc_block(float (&acc)[4][4], const float* a,
                                                      const float* b) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const float* ar = a + (16 * (w & 3) + g) * AR;
  const float* bc = b + (32 * (w >> 2) + g) * BC;
  if constexpr (MMA == FORGE_MMA_TF32) {
#pragma unroll
    for (int k0 = 0; k0 < 64; k0 += 8) {
      const int k = k0 + q;
      const u32 a0 = forge_tf32(ar[k * AC]), a1 = forge_tf32(ar[8 * AR + k * AC]);
      const u32 a2 = forge_tf32(ar[(k + 4) * AC]), a3 = forge_tf32(ar[8 * AR + (k + 4) * AC]);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float* bn = bc + 8 * nt * BC;
        forge_mma<MMA>(acc[nt], a0, a1, a2, a3, forge_tf32(bn[k * BR]),
                       forge_tf32(bn[(k + 4) * BR]));
      }
    }
  } else {
#pragma unroll
    for (int k0 = 0; k0 < 64; k0 += 16) {
      const int k = k0 + 2 * q;
      const u32 a0 = forge_bf16x2(ar[k * AC], ar[(k + 1) * AC]);
      const u32 a1 = forge_bf16x2(ar[8 * AR + k * AC], ar[8 * AR + (k + 1) * AC]);
      const u32 a2 = forge_bf16x2(ar[(k + 8) * AC], ar[(k + 9) * AC]);
      const u32 a3 = forge_bf16x2(ar[8 * AR + (k + 8) * AC], ar[8 * AR + (k + 9) * AC]);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float* bn = bc + 8 * nt * BC;
        const u32 b0 = forge_bf16x2(bn[k * BR], bn[(k + 1) * BR]);
        const u32 b1 = forge_bf16x2(bn[(k + 8) * BR], bn[(k + 9) * BR]);
        forge_mma<MMA>(acc[nt], a0, a1, a2, a3, b0, b1);
      }
    }
  }
}

static __device__ __forceinline__ float2 forge_f2(float x, float y) {
  float2 v;  // NVRTC has no make_float2
  v.x = x;
  v.y = y;
  return v;
}

static __device__ __forceinline__ void forge_tc_zero(float (&acc)[4][4]) {
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
}

// The warp's accumulator block into the [64][LD] shared tile c (LD even).
template <int LD>
static __device__ __forceinline__ void forge_tc_store(float* c, const float (&acc)[4][4]) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  float* row = c + (16 * (w & 3) + g) * LD + 32 * (w >> 2) + 2 * q;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    *reinterpret_cast<float2*>(row + 8 * nt) = forge_f2(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<float2*>(row + 8 * LD + 8 * nt) = forge_f2(acc[nt][2], acc[nt][3]);
  }
}

// The 64 x 64 product a . b^T over the 64 columns of two [64][LD] tiles (the scores q k^T,
// dP = dy v^T and their transposes) into the [64][LD] shared tile c; the caller syncs before
// reading c.
template <int LD, int MMA>
static __device__ __forceinline__ void forge_tc_dot64(float* c, const float* a, const float* b) {
  float acc[4][4];
  forge_tc_zero(acc);
  forge_tc_block<LD, 1, 1, LD, MMA>(acc, a, b);
  forge_tc_store<LD>(c, acc);
}

// acc += p . v for p a [64][PLD] tile (rows x the summed index) and v a [64][VLD] tile (the
// summed index x 64 dimensions).
template <int PLD, int VLD, int MMA>
static __device__ __forceinline__ void forge_tc_acc64(float (&acc)[4][4], const float* p,
                                                      const float* v) {
  forge_tc_block<PLD, 1, VLD, 1, MMA>(acc, p, v);
}

// Thread (ty, tx)'s elements [ty + 16 i][tx + 16 j] of a [64][LD] shared tile: the layout of
// the fp32 kernels' scores (attention_tiled.cu).
template <int LD>
static __device__ __forceinline__ void forge_tc_take(float (&v)[4][4], const float* c, int ty,
                                                     int tx) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) v[i][j] = c[(ty + 16 * i) * LD + tx + 16 * j];
}
