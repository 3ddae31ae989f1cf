// forge/dist.h: the processes of a data-parallel job (`mpirun -np N forge train ...`).
//
// A job is MPI's world when forge was built with MPI (Debian's Open MPI, found by CMake) and
// an MPI launcher started this process; otherwise it is this process alone (rank 0 of 1),
// and nothing here touches MPI. Every call is collective: all ranks make the same calls in
// the same order.
#pragma once

#include <cstddef>
#include <string>

namespace forge::dist {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// This rank's index among the ranks of its host (a GPU rank uses cuda:local_rank()), and
  /// how many ranks that host runs.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  /// Starts summing data[0, n) across ranks, in place, without waiting: every rank ends with
  /// the sum once finish() returns. data must stay untouched until then. The sums run one
  /// after another, in the order started.
  virtual void start_sum(float* data, size_t n) = 0;
  /// Lets the reductions started so far advance (MPI moves a non-blocking reduction only
  /// inside MPI calls): call it now and then while computing.
  virtual void progress() = 0;
  /// Waits for every reduction started.
  virtual void finish() = 0;
  /// Sums data[0, n) across ranks, in place, and returns when done.
  virtual void sum(double* data, size_t n) = 0;
  /// Copies data[0, bytes) of rank `root` to every other rank's data (an NCCL id).
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  /// Waits until every rank has called it.
  virtual void barrier() = 0;
  /// Ends every rank of the job with `code` (after an error on one rank, which the others
  /// would otherwise wait for forever).
  [[noreturn]] virtual void abort(int code) = 0;
};

/// The job of this process (made on first use; MPI is finalized at exit).
Comm& job();

/// Whether this build can join an MPI job ("" if so, else why not).
std::string mpi_unavailable_reason();

/// How many ranks of a job the MPI launcher starts on this host, from its environment
/// (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS), without starting MPI:
/// 0 when no launcher started this process. The CLI shares the host's threads among them.
int launcher_local_size();

}  // namespace forge::dist
