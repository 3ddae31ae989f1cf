// GPT-2 training: the training forward (with dropout) over autograd, the optimizer step
// (gradient accumulation, global-norm clipping, AdamW with decay on matrices only, warmup +
// cosine schedule) and the training state that makes a resumed run bit-identical.
//
//   gpt2::Model model = gpt2::Model::random(cfg, seed);     // or Model::load(dir)
//   train::Trainer trainer(model, hyper);                   // trains model's weights in place
//   for (...) { auto stats = trainer.step(micro_batches); } // one optimizer step
//   trainer.save_state(out + "/train_state.safetensors", {{"sampler", "123"}});
//
// Errors: forge::Error whose message starts with the function's name ("train::Trainer: ...").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/data.h"
#include "forge/gpt2.h"

namespace forge::train {

/// Hyperparameters (nanoGPT / llm.c defaults where they have one).
struct Hyper {
  int64_t steps = 1000;      // optimizer steps of the whole run (the schedule's length)
  int64_t batch = 8;         // sequences per optimizer step
  int64_t micro_batch = 0;   // sequences per forward/backward; 0: batch. Must divide batch.
  int64_t seq = 0;           // tokens per sequence; 0: the model's n_ctx
  double lr = 6e-4;          // peak learning rate
  double min_lr_ratio = 0.1; // cosine decays to lr * min_lr_ratio at `steps`
  int64_t warmup = 0;        // linear warmup steps
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f; // on matrices (rank >= 2: the four Linear weights, wte, wpe)
  double clip = 1.0;         // global grad-norm clip; 0: off
  float dropout = 0.0f;      // p at HF GPT-2's sites (embeddings, attention probs, residuals)
  uint64_t seed = 1337;      // dropout seeds derive from (seed, step, micro-batch, site)

  /// Error(Range) naming the option ("--lr must be ...") for out-of-range values.
  void validate() const;
};

/// The learning rate of 0-based step `step`: lr (step + 1) / warmup during warmup, then a
/// cosine from lr down to lr * min_lr_ratio at step == steps (constant after).
double learning_rate(const Hyper& hyper, int64_t step);

/// Mean next-token cross-entropy of `inputs` -> `targets` (U32 [B, T]) recorded on `tape`
/// over `params` (parameters(): HF order). Dropout with probability p, each site's seed
/// dropout_site_seed(seed, site) for the site index in HF order; p = 0 records no dropout.
ag::Var loss_forward(ag::Tape& tape, const gpt2::Model& model,
                     const std::vector<ag::Parameter>& params, const Tensor& inputs,
                     const Tensor& targets, float dropout, uint64_t seed);

/// Parameters wrapping the model's weight tensors without copying, named with HF's names
/// ("wte.weight", "h.0.attn.c_attn.weight", ...), in HF order.
std::vector<ag::Parameter> parameters(gpt2::Model& model);

struct StepStats {
  int64_t step = 0;        // 1-based index of this optimizer step
  double loss = 0;         // mean over the micro-batches
  double grad_norm = 0;    // before clipping
  double lr = 0;
  bool skipped = false;    // loss or grad norm not finite: no update was made
  double seconds = 0;
  int64_t tokens = 0;      // tokens processed (batch * seq)
};

class Trainer {
 public:
  /// Trains `model`'s weights in place (the model must outlive the trainer). Validates
  /// hyper; Error(Range) if seq > n_ctx.
  Trainer(gpt2::Model& model, const Hyper& hyper);

  /// One optimizer step over micro-batches (each U32 [micro_batch, seq]): forward + backward
  /// of each (gradients accumulated and averaged), clip, AdamW at learning_rate(step). A
  /// non-finite loss or grad norm skips the update (stats.skipped) but counts the step.
  StepStats step(const std::vector<data::Batch>& micro_batches);

  /// Mean loss over batches without dropout and without recording a tape.
  double evaluate(const std::vector<data::Batch>& batches) const;

  /// Completed optimizer steps.
  int64_t step_count() const;
  const Hyper& hyper() const;
  const std::vector<ag::Parameter>& params() const;

  /// Writes weights, AdamW moments, the step count and `metadata` (caller's state: sampler
  /// position, ...) to one safetensors file, atomically. Error(Io) on failure (disk full):
  /// the previous file is intact.
  void save_state(const std::string& path, const std::map<std::string, std::string>& metadata) const;
  /// Restores what save_state wrote and returns its metadata. Error(Io/Format) for a missing
  /// or corrupt file; Error(Format) "... does not match ..." when its tensors do not fit the
  /// model's config.
  std::map<std::string, std::string> load_state(const std::string& path);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace forge::train
