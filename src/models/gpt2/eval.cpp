// Evaluation: mean next-token negative log-likelihood (nats) and perplexity, in
// context-sized windows for long inputs. Logits are formed only a slice of positions at a
// time, so memory stays bounded for any window (a 1024 x 50257 logits block would be 206 MB).
#include <algorithm>
#include <cmath>
#include <string>

#include "forge/device_queue.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/mapped_files.h"
#include "forge/ops.h"

namespace forge::gpt2 {
namespace {

constexpr int64_t kSliceRows = 128;  // positions per LM-head slice

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "gpt2::evaluate: " + what);
}

/// Sum over rows r of -log softmax(lm_head(h[r]))[targets[r]]. h: [R, C] on the model's
/// device; targets: R ids (already range-checked).
double nll_sum(const Model& model, const Tensor& h, const std::vector<uint32_t>& targets) {
  double sum = 0.0;
  const int64_t R = h.dim(0);
  for (int64_t r = 0; r < R; r += kSliceRows) {
    const int64_t n = std::min(kSliceRows, R - r);
    const Tensor logits = model.lm_head(h.narrow_rows(r, n));  // [n, V]
    const std::vector<uint32_t> t(targets.begin() + r, targets.begin() + r + n);
    const Tensor tt = Tensor::from_vector(t, {n});  // host ids: checked there, then uploaded
    for (float v : read_async(gather_nll(logits, tt)).get<float>()) sum += v;
  }
  return sum;
}

void check_ids(const Model& model, const std::vector<uint32_t>& ids) {
  model.config().check_token_ids(ids.data(), ids.size(), "gpt2::evaluate");
}

EvalResult finish(double sum, int64_t tokens, int64_t predictions, int64_t windows) {
  check_mapped_files();  // weights read from a file that shrank meanwhile void the loss
  EvalResult r;
  r.loss = sum / static_cast<double>(predictions);
  r.perplexity = std::exp(r.loss);
  r.tokens = tokens;
  r.predictions = predictions;
  r.windows = windows;
  return r;
}

}  // namespace

EvalResult evaluate(const Model& model, const std::vector<uint32_t>& ids,
                    const EvalOptions& options) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t P = model.config().n_ctx;
  if (n < 2) fail(ErrorKind::Shape, "need at least 2 tokens, got " + std::to_string(n));
  const int64_t W = options.window == 0 ? P : options.window;
  if (W < 1 || W > P)
    fail(ErrorKind::Range,
         "window = " + std::to_string(W) + " outside [1, n_ctx = " + std::to_string(P) + "]");
  const int64_t S = options.stride == 0 ? W : options.stride;
  if (S < 1 || S > W)
    fail(ErrorKind::Range,
         "stride = " + std::to_string(S) + " outside [1, window = " + std::to_string(W) + "]");
  check_ids(model, ids);

  // Targets are ids[1..n). Each window scores the targets [next, last), last = next + S,
  // from the input tokens [begin, last - 1) with begin = max(0, last - 1 - W): at most W
  // inputs, and the first new target's own predecessor (next - 1) is always among them
  // because last - next <= S <= W.
  double sum = 0.0;
  int64_t windows = 0;
  for (int64_t next = 1; next < n;) {
    const int64_t last = std::min(next + S, n);
    const int64_t begin = std::max<int64_t>(0, last - 1 - W);
    const int64_t len = last - 1 - begin;
    const std::vector<uint32_t> in(ids.begin() + begin, ids.begin() + last - 1);
    const Tensor h = model.hidden(Tensor::from_vector(in, {1, len}))
                         .reshape({len, model.config().n_embd});  // [len, C]
    // Position p of the window predicts ids[begin + p + 1]; score p from next - 1 - begin.
    const int64_t first = next - 1 - begin;
    const std::vector<uint32_t> targets(ids.begin() + next, ids.begin() + last);
    sum += nll_sum(model, h.narrow_rows(first, len - first), targets);
    ++windows;
    next = last;
  }
  return finish(sum, n, n - 1, windows);
}

EvalResult evaluate(const Model& model, const Tensor& ids) {
  if (!ids.defined() || ids.dtype() != DType::U32 || ids.rank() != 2)
    fail(ErrorKind::Shape, "ids must be u32 [B, T], got " +
                               (ids.defined() ? ids.str() : std::string("an undefined tensor")));
  const int64_t B = ids.dim(0), T = ids.dim(1);
  if (B < 1 || T < 2)
    fail(ErrorKind::Shape, "need B >= 1 sequences of T >= 2 tokens, got " + ids.shape().str());
  if (T > model.config().n_ctx)
    fail(ErrorKind::Range, "T = " + std::to_string(T) +
                               " exceeds n_ctx = " + std::to_string(model.config().n_ctx) +
                               " (use the single-sequence evaluate for windows)");
  const std::vector<uint32_t> host = ids.to_vector<uint32_t>();
  check_ids(model, host);
  const Tensor h = model.hidden(ids).reshape({B * T, model.config().n_embd});  // [B*T, C]
  double sum = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<uint32_t> targets(host.begin() + b * T + 1, host.begin() + (b + 1) * T);
    sum += nll_sum(model, h.narrow_rows(b * T, T - 1), targets);
  }
  return finish(sum, B * T, B * (T - 1), 1);
}

}  // namespace forge::gpt2
