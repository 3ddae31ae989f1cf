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
#include <memory>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/data.h"
#include "forge/dist.h"
#include "forge/gpt2.h"

namespace forge::train {

/// Hyperparameters (nanoGPT / llm.c defaults where they have one).
struct Hyper {
  int64_t steps = 1000;       // optimizer steps of the whole run (the schedule's length)
  int64_t batch = 8;          // sequences per optimizer step
  int64_t micro_batch = 0;    // sequences per forward/backward; 0: batch. Must divide batch.
  int64_t seq = 0;            // tokens per sequence; 0: the model's n_ctx
  double lr = 6e-4;           // peak learning rate
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio at `steps`
  int64_t warmup = 0;         // linear warmup steps
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // on matrices (rank >= 2: the four Linear weights, wte, wpe)
  double clip = 1.0;          // global grad-norm clip; 0: off
  float dropout = 0.0f;       // p at HF GPT-2's sites (embeddings, attention probs, residuals)
  uint64_t seed = 1337;       // dropout seeds derive from (seed, step, micro-batch, site)

  /// Error(Range) naming the option ("--lr must be ...") for out-of-range values.
  void validate() const;
};

/// The learning rate of 0-based step `step`: lr (step + 1) / warmup during warmup, then a
/// cosine from lr down to lr * min_lr_ratio at step == steps (constant after).
/// Error(Range) for step < 0.
double learning_rate(const Hyper& hyper, int64_t step);

/// Mean next-token cross-entropy of `inputs` -> `targets` (U32 [B, T], T <= n_ctx, ids <
/// V) recorded on `tape` over `params` (parameters(model): names and shapes are checked).
/// Dropout with probability p at HF's sites, site s drawing its mask with
/// dropout_site_seed(seed, s): s = 0 after wte + wpe; for block l, s = 1 + 3 l on the
/// attention probabilities, 2 + 3 l after attn.c_proj, 3 + 3 l after mlp.c_proj. p = 0
/// records no dropout. The rows of `inputs` are sequences first_sequence, first_sequence + 1,
/// ... of a larger batch (a micro-batch, one rank's share): each sequence draws the masks of
/// its place in that batch, so the masks do not depend on how the batch is split.
/// A tied wte gets the embedding's and the LM head's gradients.
ag::Var loss_forward(ag::Tape& tape, const gpt2::Model& model,
                     const std::vector<ag::Parameter>& params, const Tensor& inputs,
                     const Tensor& targets, float dropout, uint64_t seed,
                     int64_t first_sequence = 0);

/// Parameters wrapping the model's weight tensors without copying, named with HF's names
/// ("wte.weight", "h.0.attn.c_attn.weight", ...), in HF order: wte, wpe, per block ln_1,
/// attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj (weight then bias), ln_f, and an
/// untied lm_head last.
std::vector<ag::Parameter> parameters(gpt2::Model& model);

struct StepStats {
  int64_t step = 0;      // 1-based index of this optimizer step
  double loss = 0;       // mean over the micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool skipped = false;  // loss or grad norm not finite: no update was made
  double seconds = 0;
  int64_t tokens = 0;  // tokens processed (batch * seq), by every rank of a job together
};

class Trainer {
 public:
  /// Trains `model`'s weights in place (the model must outlive the trainer). Validates
  /// hyper; Error(Range) if seq > n_ctx. With a `job` (data parallelism), each rank's
  /// trainer takes its share of every step, and the gradients are summed across the ranks:
  /// by the job (MPI) for a CPU model, by a group of the ranks' devices for a GPU model
  /// (forge/device_group.h: NCCL on cuda; joining it is collective). A job of one rank sums
  /// too (what a one-rank NCCL run checks); without a job nothing is summed.
  Trainer(gpt2::Model& model, const Hyper& hyper, dist::Comm* job = nullptr);

  /// One optimizer step over micro-batches (each U32 [micro_batch, seq], all one shape):
  /// forward + backward of each (gradients accumulated and averaged), clip, AdamW at
  /// learning_rate(step). A non-finite loss or grad norm skips the update (stats.skipped)
  /// but counts the step. Step k's dropout seed is dropout_site_seed(dropout_site_seed(
  /// hyper.seed, k), 0), and each sequence draws the masks of its place in the global
  /// batch. In a job of R ranks every rank passes the same number of micro-batches, rank r's
  /// being sequences [r L, (r + 1) L) of the global batch (L = its micro-batches' rows);
  /// the loss, the gradients and so the update are the global batch's on every rank.
  /// Afterwards params()' gradients hold this step's (clipped) mean gradients.
  StepStats step(const std::vector<data::Batch>& micro_batches);

  /// Mean loss over all targets of `batches` (each batch weighted by its token count)
  /// without dropout and without recording a tape.
  double evaluate(const std::vector<data::Batch>& batches) const;

  /// After each later step, writes its gradient sums' timeline to `path` as a Chrome trace
  /// (GPU models with a job only: Error(Unsupported) otherwise; "" stops).
  void set_sum_timeline(const std::string& path);

  /// Completed optimizer steps.
  int64_t step_count() const;
  const Hyper& hyper() const;
  const std::vector<ag::Parameter>& params() const;

  /// Writes weights, AdamW moments, the step count and `metadata` (caller's state: sampler
  /// position, ...) to one safetensors file, atomically. Error(Io) on failure (disk full):
  /// the previous file is intact. Keys starting with "forge." are reserved (Error(Format)).
  /// Layout (src/train/train_state.cpp): "<param>", "optim.exp_avg.<param>",
  /// "optim.exp_avg_sq.<param>"; metadata forge.step, forge.updates, forge.hyper (JSON),
  /// forge.config (config.json text), forge.format, forge.version.
  void save_state(const std::string& path,
                  const std::map<std::string, std::string>& metadata) const;
  /// Restores what save_state wrote (weights, moments, step count) and returns its whole
  /// metadata: the caller's keys plus the forge.* ones (forge.hyper is the saved Hyper; the
  /// trainer keeps the Hyper it was constructed with). Error(Io/Format) for a missing or
  /// corrupt file (another forge.version, step counts that do not parse or updates > steps,
  /// bad forge.hyper or forge.config, a weight or moment that is not finite, a second moment
  /// below 0); Error(Format) "... does not match ..." when its tensors or config do not fit
  /// the model. On error the trainer is unchanged.
  std::map<std::string, std::string> load_state(const std::string& path);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace forge::train
