// Internals shared by the trainer's files: the Trainer's state (trainer.cpp runs steps,
// train_state.cpp saves and restores it) and the Hyper <-> JSON mapping stored in state
// files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/gpt2.h"
#include "forge/tensor.h"
#include "forge/train.h"
#include "train/grad_sync.h"

namespace forge::train {

struct Trainer::Impl {
  gpt2::Model* model = nullptr;
  Hyper hyper;
  std::vector<ag::Parameter> params;  // parameters(*model): HF order
  std::vector<Tensor> m, v;           // AdamW moments, one pair per parameter
  std::vector<bool> decay;            // weight decay on params[i] (rank >= 2)
  int64_t steps_done = 0;             // optimizer steps taken (skipped ones included)
  int64_t updates = 0;                // AdamW updates made: the bias-correction count t
  dist::Comm* comm = nullptr;         // the data-parallel job; null: this process alone
  std::unique_ptr<GradSync> sync;     // with a job of several ranks
};

/// Hyper as a JSON object text, and back (every field; Error(Format) naming `source` for a
/// missing or mistyped field; then validate()).
std::string hyper_to_json(const Hyper& h);
Hyper hyper_from_json(const std::string& text, const std::string& source);

/// The dropout seed of 0-based optimizer step `step`: a function of (run seed, step) alone,
/// so a resumed run draws the same masks. Each sequence's masks are then keyed by its place
/// in the step's global batch (loss_forward's first_sequence), whatever the micro-batches
/// and ranks.
uint64_t step_dropout_seed(uint64_t seed, int64_t step);

}  // namespace forge::train
