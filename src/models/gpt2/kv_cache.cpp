// The KV cache: per-layer key and value buffers [B * H, capacity, hd], allocated once.
#include <string>

#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gpt2.h"

namespace forge::gpt2 {

KVCache::KVCache(const Model& model, int64_t batch, int64_t capacity) {
  const char* fn = "gpt2::KVCache";
  const Config& c = model.config();
  if (capacity == 0) capacity = c.n_ctx;
  if (batch < 1)
    throw Error(ErrorKind::Range, std::string(fn) + ": batch = " + std::to_string(batch) + " < 1");
  if (capacity < 1 || capacity > c.n_ctx)
    throw Error(ErrorKind::Range, std::string(fn) + ": capacity = " + std::to_string(capacity) +
                                      " outside [1, n_ctx = " + std::to_string(c.n_ctx) + "]");
  // K and V for every layer: 2 L B P C floats. Refuse more than the device has rather than
  // let an absurd batch reach the allocator (or the OOM killer).
  const double bytes = 2.0 * static_cast<double>(c.n_layer) * static_cast<double>(batch) *
                       static_cast<double>(capacity) * static_cast<double>(c.n_embd) * 4.0;
  const uint64_t memory = device_info(model.device()).memory_bytes;
  if ((memory > 0 && bytes > static_cast<double>(memory)) || bytes > 9.0e18)
    throw Error(ErrorKind::Range, std::string(fn) + ": a cache for batch " + std::to_string(batch) +
                                      " x " + std::to_string(capacity) + " positions needs " +
                                      std::to_string(bytes / 1e9) +
                                      " GB, more than the device's memory");
  batch_ = batch;
  capacity_ = capacity;
  lengths_.assign(static_cast<size_t>(batch), 0);
  n_layer_ = c.n_layer;
  n_head_ = c.n_head;
  head_dim_ = c.head_dim();
  device_ = model.device();
  const Shape shape{batch * c.n_head, capacity, c.head_dim()};
  k_.reserve(static_cast<size_t>(c.n_layer));
  v_.reserve(static_cast<size_t>(c.n_layer));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    // Zero-filled so that rows past length() never hold garbage, even for kernels that
    // read whole tiles.
    k_.push_back(Tensor::zeros(shape, DType::F32, device_));
    v_.push_back(Tensor::zeros(shape, DType::F32, device_));
  }
}

int64_t KVCache::length(int64_t row) const {
  if (row < 0 || row >= batch_)
    throw Error(ErrorKind::Range, "gpt2::KVCache::length: row " + std::to_string(row) +
                                      " outside [0, " + std::to_string(batch_) + ")");
  return lengths_[static_cast<size_t>(row)];
}

void KVCache::reset() { lengths_.assign(lengths_.size(), 0); }

void KVCache::reset(int64_t row) {
  if (row < 0 || row >= batch_)
    throw Error(ErrorKind::Range, "gpt2::KVCache::reset: row " + std::to_string(row) +
                                      " outside [0, " + std::to_string(batch_) + ")");
  lengths_[static_cast<size_t>(row)] = 0;
}

}  // namespace forge::gpt2
