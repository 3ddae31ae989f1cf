// Float64 reference implementations; see reference.h. Deliberately naive: one loop nest per
// formula of ops.h, no blocking, no shortcuts shared with the kernels.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace forge::ref {

namespace {
constexpr double kPi = 3.14159265358979323846;

size_t idx(int64_t i) { return static_cast<size_t>(i); }

int64_t rows_of(size_t numel, int64_t cols) {
  return cols == 0 ? 0 : static_cast<int64_t>(numel) / cols;
}
}  // namespace

Vec widen(const std::vector<float>& x) { return Vec(x.begin(), x.end()); }

Vec round_rows_q8(const std::vector<float>& x) {
  Vec out(x.size());
  for (size_t b = 0; b * 32 < x.size(); ++b) {
    const float* xb = x.data() + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float v = std::nearbyint(xb[i] * id);
      out[b * 32 + i] = static_cast<double>(d) * std::clamp(v, -127.0f, 127.0f);
    }
  }
  return out;
}

Vec add(const Vec& a, const Vec& b, int64_t cols) {
  Vec out(a.size());
  const bool row = b.size() != a.size();
  for (size_t i = 0; i < a.size(); ++i)
    out[i] = a[i] + (row ? b[i % static_cast<size_t>(cols)] : b[i]);
  return out;
}

double gelu(double x) {
  const double u = std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

double gelu_grad(double x) {
  // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) u',
  // u = c (x + 0.044715 x^3), u' = c (1 + 3 * 0.044715 x^2).
  const double c = std::sqrt(2.0 / kPi);
  const double u = c * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  const double du = c * (1.0 + 3.0 * 0.044715 * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

Vec gelu(const Vec& x) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = gelu(x[i]);
  return out;
}

Vec gelu_bwd(const Vec& x, const Vec& dy) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = dy[i] * gelu_grad(x[i]);
  return out;
}

Vec matmul(const Vec& a, const Vec& b, const Vec& bias, const MatmulDims& d, Vec* abs_sum) {
  const int64_t M = d.m, K = d.k, N = d.n;
  const int64_t a_stride = d.a_batched ? M * K : 0;
  const int64_t b_cols = d.trans_b ? K : N;  // stored row length of b
  const int64_t b_stride = d.b_batched ? d.b_stored_rows * b_cols : 0;
  Vec out(idx(d.batch * M * N));
  if (abs_sum) abs_sum->assign(out.size(), 0.0);
  for (int64_t bt = 0; bt < d.batch; ++bt) {
    const double* A = a.data() + bt * a_stride;
    const double* B = b.data() + bt * b_stride;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0.0, mag = 0.0;
        for (int64_t p = 0; p < K; ++p) {
          const double av = d.trans_a ? A[p * M + i] : A[i * K + p];
          const double bv = d.trans_b ? B[j * K + p] : B[p * N + j];
          acc += av * bv;
          mag += std::fabs(av * bv);
        }
        double v = d.alpha * acc;
        mag *= std::fabs(d.alpha);
        if (!bias.empty()) {
          v += bias[idx(j)];
          mag += std::fabs(bias[idx(j)]);
        }
        const size_t o = idx((bt * M + i) * N + j);
        out[o] = d.gelu ? gelu(v) : v;
        if (abs_sum) (*abs_sum)[o] = mag;
      }
    }
  }
  return out;
}

Vec matmul_add(const Vec& acc, const Vec& a, const Vec& b, const Vec& bias, const MatmulDims& d,
               Vec* abs_sum) {
  Vec out = matmul(a, b, bias, d, abs_sum);
  for (size_t i = 0; i < out.size(); ++i) out[i] += acc[i];
  return out;
}

Vec softmax(const Vec& x, const std::vector<int64_t>& dims, bool causal, int64_t offset) {
  const int64_t S = dims.empty() ? 1 : dims.back();
  const int64_t T = dims.size() >= 2 ? dims[dims.size() - 2] : 1;
  const int64_t R = rows_of(x.size(), S);
  Vec out(x.size(), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t i = r % T;  // index along dim -2
    const int64_t visible = causal ? std::min(S, i + offset + 1) : S;
    const double* xr = x.data() + r * S;
    double* o = out.data() + r * S;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, xr[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(xr[j] - mx);
    for (int64_t j = 0; j < visible; ++j) o[j] = std::exp(xr[j] - mx) / sum;
    // Columns j >= visible stay exactly 0.
  }
  return out;
}

Vec softmax_bwd(const Vec& y, const Vec& dy, int64_t cols) {
  const int64_t R = rows_of(y.size(), cols);
  Vec out(y.size());
  for (int64_t r = 0; r < R; ++r) {
    double dot = 0.0;
    for (int64_t j = 0; j < cols; ++j) dot += y[idx(r * cols + j)] * dy[idx(r * cols + j)];
    for (int64_t j = 0; j < cols; ++j) {
      const size_t e = idx(r * cols + j);
      out[e] = y[e] * (dy[e] - dot);
    }
  }
  return out;
}

namespace {
// Mean and 1/sqrt(var + eps) of one row.
void row_stats(const double* x, int64_t C, double eps, double& mean, double& rstd) {
  mean = 0.0;
  for (int64_t j = 0; j < C; ++j) mean += x[j];
  mean /= static_cast<double>(C);
  double var = 0.0;
  for (int64_t j = 0; j < C; ++j) var += (x[j] - mean) * (x[j] - mean);
  var /= static_cast<double>(C);
  rstd = 1.0 / std::sqrt(var + eps);
}
}  // namespace

Vec layernorm(const Vec& x, const Vec& gamma, const Vec& beta, int64_t cols, double eps) {
  const int64_t R = rows_of(x.size(), cols);
  Vec out(x.size());
  for (int64_t r = 0; r < R; ++r) {
    const double* xr = x.data() + r * cols;
    double mean, rstd;
    row_stats(xr, cols, eps, mean, rstd);
    for (int64_t j = 0; j < cols; ++j)
      out[idx(r * cols + j)] = (xr[j] - mean) * rstd * gamma[idx(j)] + beta[idx(j)];
  }
  return out;
}

LayerNormGrads layernorm_bwd(const Vec& x, const Vec& gamma, const Vec& dy, int64_t cols,
                             double eps) {
  // With xhat = (x - mean) rstd and g = gamma * dy (per element):
  //   dx = rstd * (g - mean_row(g) - xhat * mean_row(g * xhat)),
  //   dgamma = sum_rows(dy * xhat), dbeta = sum_rows(dy).
  const int64_t R = rows_of(x.size(), cols);
  LayerNormGrads g;
  g.dx.assign(x.size(), 0.0);
  g.dgamma.assign(idx(cols), 0.0);
  g.dbeta.assign(idx(cols), 0.0);
  g.dgamma_abs.assign(idx(cols), 0.0);
  g.dbeta_abs.assign(idx(cols), 0.0);
  Vec xhat(idx(cols)), gd(idx(cols));
  for (int64_t r = 0; r < R; ++r) {
    const double* xr = x.data() + r * cols;
    const double* dyr = dy.data() + r * cols;
    double mean, rstd;
    row_stats(xr, cols, eps, mean, rstd);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      xhat[idx(j)] = (xr[j] - mean) * rstd;
      gd[idx(j)] = gamma[idx(j)] * dyr[j];
      mean_g += gd[idx(j)];
      mean_gx += gd[idx(j)] * xhat[idx(j)];
    }
    mean_g /= static_cast<double>(cols);
    mean_gx /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) {
      g.dx[idx(r * cols + j)] = rstd * (gd[idx(j)] - mean_g - xhat[idx(j)] * mean_gx);
      g.dgamma[idx(j)] += dyr[j] * xhat[idx(j)];
      g.dbeta[idx(j)] += dyr[j];
      g.dgamma_abs[idx(j)] += std::fabs(dyr[j] * xhat[idx(j)]);
      g.dbeta_abs[idx(j)] += std::fabs(dyr[j]);
    }
  }
  return g;
}

Vec embedding(const Ids& ids, const Vec& table, int64_t cols) {
  Vec out(ids.size() * idx(cols));
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[i * idx(cols) + idx(j)] = table[idx(static_cast<int64_t>(ids[i]) * cols + j)];
  return out;
}

Vec split_heads(const Vec& qkv, int64_t B, int64_t T, int64_t H, int64_t D, int part) {
  const int64_t C = H * D;
  Vec out(idx(B * H * T * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < D; ++e)
          out[idx(((b * H + h) * T + t) * D + e)] =
              qkv[idx((b * T + t) * 3 * C + part * C + h * D + e)];
  return out;
}

Vec merge_heads(const Vec& x, int64_t B, int64_t T, int64_t H, int64_t D) {
  Vec out(idx(B * T * H * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < D; ++e)
          out[idx((b * T + t) * H * D + h * D + e)] = x[idx(((b * H + h) * T + t) * D + e)];
  return out;
}

Vec unsplit_head(const Vec& dq, const Vec& dk, const Vec& dv, int64_t B, int64_t T, int64_t H,
                 int64_t D) {
  const int64_t C = H * D;
  Vec out(idx(B * T * 3 * C));
  const Vec* parts[3] = {&dq, &dk, &dv};
  for (int part = 0; part < 3; ++part)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t e = 0; e < D; ++e)
            out[idx((b * T + t) * 3 * C + part * C + h * D + e)] =
                (*parts[part])[idx(((b * H + h) * T + t) * D + e)];
  return out;
}

Vec unmerge_heads(const Vec& x, int64_t B, int64_t T, int64_t H, int64_t D) {
  Vec out(idx(B * H * T * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < D; ++e)
          out[idx(((b * H + h) * T + t) * D + e)] = x[idx((b * T + t) * H * D + h * D + e)];
  return out;
}

Attention attention(const Vec& qkv, int64_t B, int64_t T, int64_t H, int64_t D, const Vec& k_cache,
                    const Vec& v_cache, int64_t cap, int64_t pos) {
  const int64_t C = H * D;
  const bool cached = !k_cache.empty();
  Attention r{Vec(idx(B * T * C)), k_cache, v_cache};
  // The element of part (0 q, 1 k, 2 v) of head h at new position t of batch b.
  auto at = [&](int64_t b, int64_t t, int part, int64_t h, int64_t d) {
    return qkv[idx((b * T + t) * 3 * C + part * C + h * D + d)];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = b * H + h;
      if (cached)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d) {
            r.k_cache[idx((g * cap + pos + t) * D + d)] = at(b, t, 1, h, d);
            r.v_cache[idx((g * cap + pos + t) * D + d)] = at(b, t, 2, h, d);
          }
      // Key/value element d of position s: the updated cache, or the new rows (pos = 0).
      auto key = [&](int64_t s, int64_t d) {
        return cached ? r.k_cache[idx((g * cap + s) * D + d)] : at(b, s, 1, h, d);
      };
      auto value = [&](int64_t s, int64_t d) {
        return cached ? r.v_cache[idx((g * cap + s) * D + d)] : at(b, s, 2, h, d);
      };
      for (int64_t t = 0; t < T; ++t) {
        const int64_t S = pos + t + 1;  // positions query t sees
        Vec score(idx(S));
        double mx = -INFINITY;
        for (int64_t s = 0; s < S; ++s) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, t, 0, h, d) * key(s, d);
          score[idx(s)] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, score[idx(s)]);
        }
        double sum = 0.0;
        for (double& v : score) sum += (v = std::exp(v - mx));
        for (int64_t d = 0; d < D; ++d) {
          double y = 0.0;
          for (int64_t s = 0; s < S; ++s) y += score[idx(s)] * value(s, d);
          r.y[idx((b * T + t) * C + h * D + d)] = y / sum;
        }
      }
    }
  return r;
}

Vec attention_bwd(const Vec& qkv, const Vec& dy, int64_t B, int64_t T, int64_t H, int64_t D,
                  Vec* abs_sum) {
  const int64_t C = H * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Vec dqkv(idx(B * T * 3 * C), 0.0), mag(dqkv.size(), 0.0);
  auto at = [&](int64_t b, int64_t t, int part, int64_t h, int64_t d) {
    return idx((b * T + t) * 3 * C + part * C + h * D + d);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      Vec P(idx(T * T), 0.0), dP(idx(T * T), 0.0), dS(idx(T * T), 0.0);  // [t, s], s <= t
      auto dyv = [&](int64_t t, int64_t d) { return dy[idx((b * T + t) * C + h * D + d)]; };
      for (int64_t t = 0; t < T; ++t) {
        double mx = -INFINITY, sum = 0.0, dot_pdp = 0.0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0.0, dpv = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            dot += qkv[at(b, t, 0, h, d)] * qkv[at(b, s, 1, h, d)];
            dpv += dyv(t, d) * qkv[at(b, s, 2, h, d)];
          }
          P[idx(t * T + s)] = dot * scale;
          dP[idx(t * T + s)] = dpv;
          mx = std::max(mx, dot * scale);
        }
        for (int64_t s = 0; s <= t; ++s)
          sum += (P[idx(t * T + s)] = std::exp(P[idx(t * T + s)] - mx));
        for (int64_t s = 0; s <= t; ++s) {
          P[idx(t * T + s)] /= sum;
          dot_pdp += P[idx(t * T + s)] * dP[idx(t * T + s)];
        }
        for (int64_t s = 0; s <= t; ++s)
          dS[idx(t * T + s)] = P[idx(t * T + s)] * (dP[idx(t * T + s)] - dot_pdp);
      }
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s <= t; ++s)
          for (int64_t d = 0; d < D; ++d) {
            const double p = P[idx(t * T + s)], ds = dS[idx(t * T + s)] * scale;
            const double q = qkv[at(b, t, 0, h, d)], k = qkv[at(b, s, 1, h, d)];
            dqkv[at(b, t, 0, h, d)] += ds * k;  // dq_t += dS_ts k_s
            mag[at(b, t, 0, h, d)] += std::fabs(ds * k);
            dqkv[at(b, s, 1, h, d)] += ds * q;  // dk_s += dS_ts q_t
            mag[at(b, s, 1, h, d)] += std::fabs(ds * q);
            dqkv[at(b, s, 2, h, d)] += p * dyv(t, d);  // dv_s += P_ts dy_t
            mag[at(b, s, 2, h, d)] += std::fabs(p * dyv(t, d));
          }
    }
  if (abs_sum) *abs_sum = std::move(mag);
  return dqkv;
}

Vec sum_rows(const Vec& x, int64_t cols, Vec* abs_sum) {
  Vec out(idx(cols), 0.0);
  if (abs_sum) abs_sum->assign(idx(cols), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    out[i % idx(cols)] += x[i];
    if (abs_sum) (*abs_sum)[i % idx(cols)] += std::fabs(x[i]);
  }
  return out;
}

Vec scatter_add_rows(const Ids& ids, const Vec& src, int64_t num_rows, int64_t cols, Vec* abs_sum) {
  Vec out(idx(num_rows * cols), 0.0);
  if (abs_sum) abs_sum->assign(out.size(), 0.0);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const size_t o = idx(static_cast<int64_t>(ids[i]) * cols + j);
      out[o] += src[i * idx(cols) + idx(j)];
      if (abs_sum) (*abs_sum)[o] += std::fabs(src[i * idx(cols) + idx(j)]);
    }
  return out;
}

namespace {
double logsumexp(const double* x, int64_t n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - mx);
  return mx + std::log(s);
}
}  // namespace

Vec gather_nll(const Vec& logits, const Ids& targets, int64_t cols) {
  Vec out(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const double* row = logits.data() + i * idx(cols);
    out[i] = logsumexp(row, cols) - row[targets[i]];
  }
  return out;
}

Vec ce_bwd(const Vec& logits, const Ids& targets, int64_t cols, double scale) {
  Vec out(logits.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const double* row = logits.data() + i * idx(cols);
    const double lse = logsumexp(row, cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double onehot = static_cast<int64_t>(targets[i]) == j ? 1.0 : 0.0;
      out[i * idx(cols) + idx(j)] = (std::exp(row[j] - lse) - onehot) * scale;
    }
  }
  return out;
}

namespace {
// lowbias32 on a value held in 64 bits; every product is reduced mod 2^32 explicitly.
uint64_t mix(uint64_t x) {
  constexpr uint64_t kMask = 0xFFFFFFFFull;
  x &= kMask;
  x ^= x >> 16;
  x = (x * 0x7FEB352Dull) & kMask;
  x ^= x >> 15;
  x = (x * 0x846CA68Bull) & kMask;
  x ^= x >> 16;
  return x;
}
}  // namespace

uint32_t dropout_hash(uint64_t seed, uint64_t index) {
  constexpr uint64_t kMask = 0xFFFFFFFFull;
  const uint64_t seed_lo = seed & kMask, seed_hi = seed >> 32;
  const uint64_t index_lo = index & kMask, index_hi = index >> 32;
  const uint64_t first = mix(index_lo ^ seed_lo);
  const uint64_t spread = (index_hi * 0x9E3779B9ull) & kMask;
  return static_cast<uint32_t>(mix(first ^ seed_hi ^ spread));
}

bool dropout_keep(uint64_t seed, uint64_t index, float p) {
  // threshold = floor(p * 2^24), p widened from float; compare the top 24 hash bits.
  const double threshold = std::floor(static_cast<double>(p) * 16777216.0);
  return static_cast<double>(dropout_hash(seed, index) >> 8) >= threshold;
}

Vec dropout(const Vec& x, float p, uint64_t seed, uint64_t index0) {
  const float s = 1.0f / (1.0f - p);  // ops.h: the scale is computed once, as float
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = dropout_keep(seed, index0 + i, p) ? x[i] * static_cast<double>(s) : 0.0;
  return out;
}

double sumsq(const Vec& x) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return s;
}

Vec scale(const Vec& x, double s) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * s;
  return out;
}

void adamw(AdamWState& s, const Vec& grad, double lr, double beta1, double beta2, double eps,
           double weight_decay, int64_t step) {
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(beta1, t);
  const double bc2 = 1.0 - std::pow(beta2, t);
  for (size_t i = 0; i < s.param.size(); ++i) {
    s.param[i] -= lr * weight_decay * s.param[i];
    s.m[i] = beta1 * s.m[i] + (1.0 - beta1) * grad[i];
    s.v[i] = beta2 * s.v[i] + (1.0 - beta2) * grad[i] * grad[i];
    s.param[i] -= lr * (s.m[i] / bc1) / (std::sqrt(s.v[i] / bc2) + eps);
  }
}

}  // namespace forge::ref
