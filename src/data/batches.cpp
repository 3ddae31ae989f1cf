// Batches for training (seeded random windows) and evaluation (fixed consecutive windows).
#include <cstring>
#include <limits>

#include "forge/data.h"
#include "forge/error.h"

namespace forge::data {
namespace {

// A batch's tensors are allocated up front; the cap turns a mistyped size into an error
// instead of an attempt to allocate terabytes.
constexpr int64_t kMaxBatchTokens = int64_t{1} << 31;

void check_sizes(const char* fn, int64_t batch, int64_t seq) {
  if (batch < 1 || seq < 1)
    throw Error(ErrorKind::Range, std::string(fn) + ": batch and seq must be >= 1, got batch " +
                                      std::to_string(batch) + ", seq " + std::to_string(seq));
  if (seq >= kMaxBatchTokens || batch > kMaxBatchTokens / seq)
    throw Error(ErrorKind::Range, std::string(fn) + ": batch * seq = " + std::to_string(batch) +
                                      " * " + std::to_string(seq) + " tokens is more than " +
                                      std::to_string(kMaxBatchTokens));
}

// SplitMix64's finalizer: a bijective mix whose output bits all depend on all input bits,
// so consecutive counters give independent-looking starts.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills row r of inputs/targets from the window of seq + 1 tokens at `start`.
void fill_row(const uint32_t* tokens, int64_t start, int64_t seq, int64_t r, uint32_t* inputs,
              uint32_t* targets) {
  const auto n = static_cast<size_t>(seq);
  std::memcpy(inputs + r * seq, tokens + start, n * sizeof(uint32_t));
  std::memcpy(targets + r * seq, tokens + start + 1, n * sizeof(uint32_t));
}

}  // namespace

BatchSampler::BatchSampler(std::shared_ptr<const std::vector<uint32_t>> tokens, int64_t batch,
                           int64_t seq, uint64_t seed)
    : tokens_(std::move(tokens)), batch_(batch), seq_(seq), seed_(seed) {
  check_sizes("BatchSampler", batch, seq);
  if (!tokens_) throw Error(ErrorKind::Range, "BatchSampler: no tokens (null pointer)");
  const auto n = static_cast<int64_t>(tokens_->size());
  if (n < seq + 1)
    throw Error(ErrorKind::Range, "BatchSampler: data shorter than one sequence: a window of seq " +
                                      std::to_string(seq) + " needs " + std::to_string(seq + 1) +
                                      " tokens, the data has " + std::to_string(n));
}

Batch BatchSampler::next() {
  // Window starts are 0 .. n - seq - 1 (the window holds seq + 1 tokens).
  const auto starts = static_cast<uint64_t>(tokens_->size()) - static_cast<uint64_t>(seq_);
  Batch b{Tensor::empty({batch_, seq_}, DType::U32), Tensor::empty({batch_, seq_}, DType::U32)};
  uint32_t* in = b.inputs.data<uint32_t>();
  uint32_t* tg = b.targets.data<uint32_t>();
  for (int64_t r = 0; r < batch_; ++r) {
    const uint64_t j = position_++;
    // Two rounds so that nearby seeds do not give shifted copies of one sequence. The
    // reduction to [0, starts) is Lemire's multiply-shift (bias < starts / 2^64: nil).
    const uint64_t h = mix(mix(seed_ ^ 0x6A09E667F3BCC909ull) + j);
    const auto start = static_cast<int64_t>((static_cast<unsigned __int128>(h) * starts) >> 64);
    fill_row(tokens_->data(), start, seq_, r, in, tg);
  }
  return b;
}

std::vector<Batch> sequential_batches(const std::vector<uint32_t>& tokens, int64_t batch,
                                      int64_t seq, int64_t max_batches) {
  check_sizes("sequential_batches", batch, seq);
  if (max_batches < 0)
    throw Error(ErrorKind::Range, "sequential_batches: max_batches must be >= 0 (0: all), got " +
                                      std::to_string(max_batches));
  const auto n = static_cast<int64_t>(tokens.size());
  int64_t windows = n / (seq + 1);
  // Compared in batches, so max_batches * batch (only formed when smaller) cannot overflow.
  if (max_batches > 0 && max_batches < (windows + batch - 1) / batch) windows = max_batches * batch;
  std::vector<Batch> out;
  for (int64_t w0 = 0; w0 < windows; w0 += batch) {
    const int64_t rows = std::min(batch, windows - w0);
    Batch b{Tensor::empty({rows, seq}, DType::U32), Tensor::empty({rows, seq}, DType::U32)};
    for (int64_t r = 0; r < rows; ++r)
      fill_row(tokens.data(), (w0 + r) * (seq + 1), seq, r, b.inputs.data<uint32_t>(),
               b.targets.data<uint32_t>());
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace forge::data
