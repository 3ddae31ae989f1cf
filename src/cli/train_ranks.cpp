// forge train's data-parallel plan (train_ranks.h).
#include "cli/train_ranks.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "forge/devices.h"
#include "forge/error.h"

namespace forge::cli {

Ranks plan_ranks(TrainArgs& a, dist::Comm& job) {
  Ranks r;
  r.rank = job.rank();
  r.size = job.size();
  r.local = a.batch;
  const char* alone = std::getenv("FORGE_SUM_ALONE");
  if (r.size == 1 && !(alone != nullptr && std::strcmp(alone, "1") == 0)) return r;
  r.job = &job;
  const Device device = parse_device(a.device);
  const std::string ranks = std::to_string(r.size) + (r.size == 1 ? " rank" : " ranks");
  if (device.backend() == "cuda") {
    if (a.device == "cuda" && r.size > 1) {
      a.device = "cuda:" + std::to_string(job.local_rank());
    } else if (a.device != "cuda" && job.local_size() > 1) {
      throw Error(ErrorKind::Range,
                  "train: --device " + a.device + ": this host runs " +
                      std::to_string(job.local_size()) +
                      " ranks, one GPU each; give --device cuda (rank r of a host "
                      "takes cuda:r)");
    }
  } else if (!device.is_cpu()) {
    throw Error(ErrorKind::Unsupported, "train: data-parallel training (" + ranks +
                                            ") sums gradients on the CPU (MPI) or on cuda devices "
                                            "(NCCL), not on " +
                                            device.str());
  }
  if (a.batch % r.size != 0)
    throw Error(ErrorKind::Range, "train: --batch " + std::to_string(a.batch) +
                                      " does not split over " + ranks +
                                      ": give a multiple of the rank count");
  r.local = a.batch / r.size;
  return r;
}

void split_micro(Ranks& r, const TrainArgs& a) {
  r.micro = std::min(a.micro_batch, r.local);
  if (r.local % r.micro != 0)
    throw Error(ErrorKind::Range, "train: --micro-batch " + std::to_string(a.micro_batch) +
                                      " does not divide each rank's " + std::to_string(r.local) +
                                      " sequences (--batch " + std::to_string(a.batch) + " over " +
                                      std::to_string(r.size) + " ranks)");
}

}  // namespace forge::cli
