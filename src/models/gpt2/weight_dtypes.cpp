// GPT-2 weights in other dtypes: the layout rule (linear weights of F16, BF16, Q8_0, Q4_0
// stored [out, in], as GGUF stores them; F32 ones HF's [in, out]), converting a model's
// weights to a dtype and back to F32, and the bytes they take.
#include <cstring>
#include <vector>

#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/quantize.h"
#include "models/gpt2/weight_layout.h"

namespace forge::gpt2 {

Tensor transposed(const Tensor& w) {
  const int64_t R = w.dim(0), C = w.dim(1);
  const size_t e = dtype_size(w.dtype());  // element dtypes only (the caller's rule)
  const std::vector<uint8_t> in = w.to_bytes();
  std::vector<uint8_t> out(in.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      std::memcpy(out.data() + (static_cast<size_t>(c * R + r)) * e,
                  in.data() + (static_cast<size_t>(r * C + c)) * e, e);
  return Tensor::from_bytes(out.data(), out.size(), Shape{C, R}, w.dtype(), w.device());
}

Tensor linear_in_dtype(const Tensor& w_in_out, DType dtype) {
  if (dtype == DType::F32) return w_in_out;
  // [in, out] f32 -> [out, in] f32 -> dtype (blocks along `in`).
  return convert_weights(transposed(w_in_out), dtype);
}

Tensor linear_as_f32(const Tensor& w) {
  if (w.dtype() == DType::F32) return w;
  return transposed(widen_weights(w));  // [out, in] -> f32 [in, out]
}

namespace {

// Applies f to every linear weight and g to the [V, C] tables of w (wte, an untied head).
template <class F, class G>
Weights map_weights(const Weights& w, F f, G g) {
  Weights out = w;
  for (LayerWeights& L : out.layers)
    for (Tensor* t : {&L.attn_w, &L.attn_proj_w, &L.fc_w, &L.fc_proj_w}) *t = f(*t);
  out.wte = g(out.wte);
  if (out.lm_head.defined()) out.lm_head = g(out.lm_head);
  return out;
}

}  // namespace

Model Model::converted(DType dtype) const {
  const char* fn = "gpt2::Model::converted";
  if (dtype == DType::U32)
    throw Error(ErrorKind::DType, std::string(fn) + ": u32 is not a weight dtype");
  if (dtype_is_block(dtype) && config_.n_embd % 32 != 0)
    throw Error(ErrorKind::Shape, std::string(fn) + ": " + dtype_name(dtype) +
                                      " needs n_embd to be a multiple of 32, got " +
                                      std::to_string(config_.n_embd));
  const Model f32 = widened();
  Weights w = map_weights(
      f32.weights_, [&](const Tensor& t) { return linear_in_dtype(t, dtype); },
      [&](const Tensor& t) { return dtype == DType::F32 ? t : convert_weights(t, dtype); });
  return from_weights(config_, std::move(w));
}

Model Model::widened() const {
  if (weight_dtype() == DType::F32 && !mixed_dtypes()) return *this;
  Weights w = map_weights(weights_, linear_as_f32, [](const Tensor& t) {
    return t.dtype() == DType::F32 ? t : widen_weights(t);
  });
  return from_weights(config_, std::move(w));
}

DType Model::weight_dtype() const {
  return weights_.layers.empty() ? weights_.wte.dtype() : weights_.layers[0].attn_w.dtype();
}

bool Model::mixed_dtypes() const {
  const DType d = weight_dtype();
  bool mixed =
      weights_.wte.dtype() != d || (weights_.lm_head.defined() && weights_.lm_head.dtype() != d);
  for (const LayerWeights& L : weights_.layers)
    for (const Tensor* t : {&L.attn_w, &L.attn_proj_w, &L.fc_w, &L.fc_proj_w})
      mixed = mixed || t->dtype() != d;
  return mixed;
}

uint64_t Model::weight_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : named_weights()) n += t.nbytes();
  return n;
}

Weights runnable_on(Weights w, Device device) {
  auto fix = [&](Tensor& t, bool linear) {
    if (t.dtype() == DType::F32 || device_runs_weights(device, t.dtype())) return;
    t = linear ? linear_as_f32(t) : widen_weights(t);
  };
  for (LayerWeights& L : w.layers)
    for (Tensor* t : {&L.attn_w, &L.attn_proj_w, &L.fc_w, &L.fc_proj_w}) fix(*t, true);
  fix(w.wte, false);
  if (w.lm_head.defined()) fix(w.lm_head, false);
  return w;
}

}  // namespace forge::gpt2
