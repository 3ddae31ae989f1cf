// forge train's data-parallel plan: this rank's share of every global batch, its
// micro-batches and its device (`mpirun -np N forge train ...`).
#pragma once

#include <cstdint>

#include "cli/train_args.h"
#include "forge/dist.h"

namespace forge::cli {

struct Ranks {
  /// The job, when gradients are summed across ranks: several ranks, or one rank with
  /// FORGE_SUM_ALONE=1 (a one-rank NCCL group: tests, timelines). Null otherwise.
  dist::Comm* job = nullptr;
  int rank = 0, size = 1;
  int64_t local = 0;  // sequences of each global batch this rank trains on
  int64_t micro = 0;  // sequences per forward pass: --micro-batch, at most `local`
  bool lead() const { return rank == 0; }
};

/// Checks that the global batch splits evenly over the ranks, and that the device can sum
/// gradients across them: the CPU (MPI) or cuda (NCCL). With several ranks, `--device
/// cuda` becomes cuda:<local rank> (one GPU per rank of a host). Error(Range/Unsupported).
Ranks plan_ranks(TrainArgs& a, dist::Comm& job);

/// A rank's micro-batches: --micro-batch sequences (its default, the whole --batch, is what
/// one process runs; evaluation keeps using it), at most the rank's share, which it must
/// divide (Error(Range)).
void split_micro(Ranks& r, const TrainArgs& a);

}  // namespace forge::cli
