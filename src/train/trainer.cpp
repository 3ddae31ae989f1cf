// Trainer: one optimizer step = forward + backward of every micro-batch (gradients
// accumulated as the mean over micro-batches), global-norm clipping, then AdamW at the
// scheduled learning rate; and evaluation without a tape.
#include <chrono>
#include <cmath>
#include <string>

#include "forge/device_queue.h"
#include "forge/error.h"
#include "forge/mapped_files.h"
#include "forge/ops.h"
#include "train/train_impl.h"

namespace forge::train {
namespace {

[[noreturn]] void fail(const char* fn, ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(fn) + ": " + what);
}

/// Checks one batch's tensors: U32 [B, T] inputs and targets of one shape.
void check_batch(const char* fn, const data::Batch& b, size_t index) {
  const std::string at = "batch " + std::to_string(index) + ": ";
  for (const Tensor* t : {&b.inputs, &b.targets}) {
    const char* what = t == &b.inputs ? "inputs" : "targets";
    if (!t->defined()) fail(fn, ErrorKind::Shape, at + what + " is an undefined tensor");
    if (t->dtype() != DType::U32)
      fail(fn, ErrorKind::DType, at + what + " must be u32, got " + dtype_name(t->dtype()));
    if (t->rank() != 2 || t->dim(0) < 1 || t->dim(1) < 1)
      fail(fn, ErrorKind::Shape,
           at + what + " must be [B, T] with B, T >= 1, got " + t->shape().str());
  }
  if (b.inputs.shape() != b.targets.shape())
    fail(fn, ErrorKind::Shape,
         at + "targets " + b.targets.shape().str() + " differ from inputs " +
             b.inputs.shape().str());
}

/// Rows of hidden states scored per LM-head call in evaluate(): bounds the logits buffer
/// to rows x V floats (256 x 50257 x 4 B = 51 MB) whatever the batch.
constexpr int64_t kEvalRows = 256;

/// Gradient bucket size of data-parallel steps (PyTorch DDP's default, 25 MiB): large
/// enough that a reduction's latency is paid rarely, small enough that the first buckets
/// start early in the backward pass.
constexpr size_t kBucketBytes = size_t{25} << 20;

}  // namespace

Trainer::Trainer(gpt2::Model& model, const Hyper& hyper, dist::Comm* job)
    : impl_(std::make_shared<Impl>()) {
  const char* fn = "train::Trainer";
  hyper.validate();
  if (hyper.seq > model.config().n_ctx)
    fail(fn, ErrorKind::Range,
         "--seq " + std::to_string(hyper.seq) +
             " exceeds the model's context n_ctx = " + std::to_string(model.config().n_ctx));
  Impl& s = *impl_;
  s.model = &model;
  s.hyper = hyper;
  s.params = parameters(model);
  for (const ag::Parameter& p : s.params) {
    const Tensor& v = p.value();
    s.m.push_back(Tensor::zeros(v.shape(), DType::F32, v.device()));
    s.v.push_back(Tensor::zeros(v.shape(), DType::F32, v.device()));
    // Matrices (Linear weights, embeddings, an untied head) decay; biases and LayerNorm
    // parameters do not (GPT-2/nanoGPT practice).
    s.decay.push_back(v.rank() >= 2);
  }
  if (job != nullptr) {
    s.comm = job;
    s.sync = std::make_unique<GradSync>(*job, s.params, kBucketBytes);
  }
}

StepStats Trainer::step(const std::vector<data::Batch>& micro_batches) {
  const char* fn = "train::Trainer::step";
  Impl& s = *impl_;
  if (micro_batches.empty()) fail(fn, ErrorKind::Shape, "no micro-batches");
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    check_batch(fn, micro_batches[i], i);
    // Equal shapes make the mean over micro-batch means the mean over all tokens.
    if (micro_batches[i].inputs.shape() != micro_batches[0].inputs.shape())
      fail(fn, ErrorKind::Shape,
           "micro-batch " + std::to_string(i) + " is " + micro_batches[i].inputs.shape().str() +
               ", micro-batch 0 is " + micro_batches[0].inputs.shape().str() +
               " (all must have one shape)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  const int64_t n = static_cast<int64_t>(micro_batches.size());
  const int ranks = s.comm != nullptr ? s.comm->size() : 1;
  const int64_t rows = micro_batches[0].inputs.dim(0);  // sequences per micro-batch
  // This rank's sequences in the global batch of ranks x n micro-batches.
  const int64_t first = (s.comm != nullptr ? s.comm->rank() : 0) * n * rows;
  // Each micro-batch's loss enters with weight 1/(n ranks): the gradient of the mean loss
  // once the ranks' gradients are summed.
  const float seed_grad = 1.0f / static_cast<float>(n * ranks);
  const uint64_t seed = step_dropout_seed(s.hyper.seed, s.steps_done);
  ag::zero_grad(s.params);
  std::vector<PendingRead> losses;  // read once all micro-batches are queued
  for (int64_t i = 0; i < n; ++i) {
    // Host batches (the samplers') go to a GPU model as they are: the index ops check ids
    // on the host and upload them, so a step waits for the device only for its losses and
    // the gradient norm.
    const data::Batch& b = micro_batches[static_cast<size_t>(i)];
    ag::Tape tape;
    const ag::Var loss = loss_forward(tape, *s.model, s.params, b.inputs, b.targets,
                                      s.hyper.dropout, seed, first + i * rows);
    losses.push_back(read_async(loss.value()));
    if (s.sync && i == n - 1)  // the last pass completes each gradient: sum it at once
      tape.backward(loss, seed_grad, [&](const ag::Parameter& p) { s.sync->ready(p); });
    else
      tape.backward(loss, seed_grad);
    st.tokens += b.inputs.numel() * ranks;
  }
  double loss_sum = 0.0;
  for (PendingRead& l : losses) loss_sum += static_cast<double>(l.get<float>()[0]);
  if (s.sync) {
    s.sync->finish();
    s.comm->sum(&loss_sum, 1);
  }
  st.loss = loss_sum / static_cast<double>(n * ranks);
  st.grad_norm = s.hyper.clip > 0.0 ? ag::clip_grad_norm(s.params, s.hyper.clip)
                                    : ag::global_grad_norm(s.params);
  st.lr = learning_rate(s.hyper, s.steps_done);
  st.skipped = !std::isfinite(st.loss) || !std::isfinite(st.grad_norm);
  if (!st.skipped) {
    ++s.updates;
    AdamWParams ap;
    ap.lr = static_cast<float>(st.lr);
    ap.beta1 = s.hyper.beta1;
    ap.beta2 = s.hyper.beta2;
    ap.eps = s.hyper.eps;
    ap.step = s.updates;
    for (size_t i = 0; i < s.params.size(); ++i) {
      const ag::Parameter& p = s.params[i];
      if (!p.has_grad()) continue;  // a frozen parameter
      ap.weight_decay = s.decay[i] ? s.hyper.weight_decay : 0.0f;
      adamw(p.value(), p.grad(), s.m[i], s.v[i], ap);
    }
  }
  ++s.steps_done;
  st.step = s.steps_done;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check_mapped_files();  // an init model mapped from a file that shrank: zeros were read
  return st;
}

double Trainer::evaluate(const std::vector<data::Batch>& batches) const {
  const char* fn = "train::Trainer::evaluate";
  const Impl& s = *impl_;
  if (batches.empty()) fail(fn, ErrorKind::Shape, "no batches");
  double total = 0.0;
  int64_t count = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const data::Batch& b = batches[i];
    check_batch(fn, b, i);
    const int64_t N = b.inputs.numel();
    const Tensor h = s.model->hidden(b.inputs).reshape({N, s.model->config().n_embd});
    const Tensor tg = b.targets.reshape({N});
    for (int64_t r = 0; r < N; r += kEvalRows) {
      const int64_t rows = std::min(kEvalRows, N - r);
      const Tensor nll =
          gather_nll(s.model->lm_head(h.narrow_rows(r, rows)), tg.narrow_rows(r, rows));  // [rows]
      for (float x : read_async(nll).get<float>()) total += static_cast<double>(x);
    }
    count += N;
  }
  return total / static_cast<double>(count);
}

void Trainer::set_sum_timeline(const std::string& path) {
  if (!impl_->sync)
    fail("train::Trainer::set_sum_timeline", ErrorKind::Unsupported,
         "no gradient sums to time: the trainer has no job");
  impl_->sync->set_timeline(path);
}

int64_t Trainer::step_count() const { return impl_->steps_done; }
const Hyper& Trainer::hyper() const { return impl_->hyper; }
const std::vector<ag::Parameter>& Trainer::params() const { return impl_->params; }

}  // namespace forge::train
