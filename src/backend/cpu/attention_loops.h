// The portable body of the fused attention tile (attention_tile.h), auto-vectorized for
// whatever instruction set the including file is compiled for. In an unnamed namespace for
// the reason span_loops.h gives: each ISA's file must keep its own copy.
//
// Tiles of more than kAttnRowsDirect queries take flash-attention's schedule: the tile's
// queries (scaled, zero-padded to hdp floats) stay in scratch; keys are taken kAttnBc at a
// time, transposed into Kt so that the scores of a query against the block are an axpy over
// the block's 64 keys (vector lanes = keys, kAttnGroup queries per pass), then an online
// softmax: running max m and sum l per query, the output accumulator O rescaled by
// exp(m_old - m_new) whenever the max grows. The [T, S] score matrix never exists; every
// inner loop has a fixed trip count the compiler vectorizes.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>

#include "backend/cpu/attention_tile.h"
#include "backend/cpu/span_loops.h"

namespace forge::cpu {
namespace {

static_assert(kAttnBc % kLanes == 0 && kAttnBc % 4 == 0);

/// A tile of few queries (decode): packing transposed key blocks would cost as much as the
/// scores themselves, so each query takes the plain two-pass route over its keys in place:
/// dot products against the key rows, softmax over the scores, a weighted sum of the value
/// rows. Memory-bound on the keys and values, like the decode step it serves.
inline void attention_rows_loop(const AttnTile& a, float* scratch) {
  const int64_t hd = a.hd, hdp = attn_padded(hd);
  float* q = scratch;        // [hdp] the scaled query
  float* acc = q + hdp;      // [hdp] the weighted sum of values
  float* score = acc + hdp;  // [first + rows] scores, then their exponentials
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t n = a.first + r + 1;  // keys query r sees
    const float* qr = a.q + r * a.q_stride;
    for (int64_t d = 0; d < hd; ++d) q[d] = qr[d] * a.scale;
    for (int64_t s = 0; s < n; ++s) score[s] = row_dot(q, a.k + s * a.kv_stride, hd);
    const float mx = row_max(score, n);
    for (int64_t s = 0; s < n; ++s) score[s] = exp_fast(score[s] - mx);
    const float inv = 1.0f / row_sum(score, n);
    for (int64_t d = 0; d < hd; ++d) acc[d] = 0.0f;
    for (int64_t s = 0; s < n; ++s) {
      const float w = score[s];
      const float* v = a.v + s * a.kv_stride;
      for (int64_t d = 0; d < hd; ++d) acc[d] += w * v[d];
    }
    float* y = a.y + r * a.y_stride;
    for (int64_t d = 0; d < hd; ++d) y[d] = acc[d] * inv;
  }
}

inline void attention_tile_loop(const AttnTile& a, float* scratch) {
  if (a.rows <= kAttnRowsDirect) {
    attention_rows_loop(a, scratch);
    return;
  }
  constexpr int64_t Bc = kAttnBc;
  const int64_t hd = a.hd, hdp = attn_padded(hd), rows = a.rows;
  const int64_t rows_g = attn_group_rows(rows);
  // Scratch layout (attn_scratch_floats):
  float* Q = scratch;            // [rows_g, hdp] scaled queries, zero beyond hd and rows
  float* Kt = Q + rows_g * hdp;  // [hdp, Bc]  the key block transposed
  float* V = Kt + hdp * Bc;      // [Bc, hdp]  the value block
  float* O = V + Bc * hdp;       // [rows, hdp] unnormalized outputs
  float* m = O + rows * hdp;     // [rows] running max of the scores
  float* l = m + rows;           // [rows] running sum of exp(score - m)
  // Zeros everywhere first: padding lanes and the unused tail of a partial block must hold
  // finite values (a 0 weight times a stale NaN would still be NaN).
  std::memset(scratch, 0, attn_scratch_floats(a) * sizeof(float));
  for (int64_t r = 0; r < rows; ++r) {
    const float* q = a.q + r * a.q_stride;
    for (int64_t d = 0; d < hd; ++d) Q[r * hdp + d] = q[d] * a.scale;
    m[r] = -std::numeric_limits<float>::infinity();
  }

  // Online softmax step of query r over the first n keys of the block, scores s[0, n).
  auto update = [&](int64_t r, int64_t n, const float* s) {
    const float m_new = std::max(m[r], row_max(s, n));
    const float corr = exp_fast(m[r] - m_new);  // 0 on the first block (m = -inf)
    float p[Bc];
    for (int64_t j = 0; j < Bc; ++j) p[j] = select(j < n, exp_fast(s[j] - m_new), 0.0f);
    float lanes[kLanes] = {};  // row_sum's lanes, for the fixed length Bc
    for (int64_t j = 0; j < Bc; j += kLanes)
      for (int u = 0; u < kLanes; ++u) lanes[u] += p[j + u];
    float psum = 0.0f;
    for (float x : lanes) psum += x;
    l[r] = l[r] * corr + psum;
    m[r] = m_new;
    // O_r = O_r * corr + sum_j p_j v_j, four keys per pass over O_r (p is 0 past n, and
    // the V rows there hold finite values).
    float* o = O + r * hdp;
    for (int64_t d = 0; d < hdp; ++d) o[d] *= corr;
    const int64_t n4 = (n + 3) / 4 * 4;
    for (int64_t j = 0; j < n4; j += 4) {
      const float p0 = p[j], p1 = p[j + 1], p2 = p[j + 2], p3 = p[j + 3];
      const float* v0 = V + j * hdp;
      for (int64_t d = 0; d < hdp; ++d)
        o[d] += p0 * v0[d] + p1 * v0[hdp + d] + p2 * v0[2 * hdp + d] + p3 * v0[3 * hdp + d];
    }
  };

  const int64_t n_keys = a.first + rows;  // keys the last query sees
  for (int64_t j0 = 0; j0 < n_keys; j0 += Bc) {
    const int64_t nb = std::min(Bc, n_keys - j0);  // keys in this block
    for (int64_t j = 0; j < nb; ++j) {
      const float* k = a.k + (j0 + j) * a.kv_stride;
      const float* v = a.v + (j0 + j) * a.kv_stride;
      for (int64_t d = 0; d < hd; ++d) Kt[d * Bc + j] = k[d];
      std::memcpy(V + j * hdp, v, static_cast<size_t>(hd) * sizeof(float));
    }
    for (int64_t r0 = 0; r0 < rows; r0 += kAttnGroup) {
      // Scores of kAttnGroup queries at once, s[i][j] = q_{r0+i} . k_{j0+j}: lanes over
      // keys, each key vector loaded once for the group.
      float s[kAttnGroup][Bc] = {};
      for (int64_t d = 0; d < hdp; ++d) {
        const float* kt = Kt + d * Bc;
        float qd[kAttnGroup];
        for (int64_t i = 0; i < kAttnGroup; ++i) qd[i] = Q[(r0 + i) * hdp + d];
        for (int64_t j = 0; j < Bc; ++j)
          for (int64_t i = 0; i < kAttnGroup; ++i) s[i][j] += qd[i] * kt[j];
      }
      for (int64_t i = 0; i < kAttnGroup && r0 + i < rows; ++i) {
        const int64_t n = std::min(nb, a.first + r0 + i + 1 - j0);  // keys it sees here
        if (n > 0) update(r0 + i, n, s[i]);  // n <= 0: a diagonal block's first queries
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / l[r];
    float* y = a.y + r * a.y_stride;
    for (int64_t d = 0; d < hd; ++d) y[d] = O[r * hdp + d] * inv;
  }
}

}  // namespace
}  // namespace forge::cpu
