// dist/job.h over MPI (Debian's Open MPI): the world communicator, non-blocking in-place
// sums for gradient buckets, and errors as forge::Error instead of MPI's abort.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/job.h"
#include "forge/error.h"

namespace forge::dist::detail {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(ErrorKind::Io, std::string("dist: ") + what + " failed: " + std::string(text, len));
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      // Only the main thread calls MPI (the CPU pool's workers never do).
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_init_ = true;
    }
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    MPI_Comm host = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host),
          "MPI_Comm_split_type");
    check(MPI_Comm_rank(host, &local_rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(host, &local_size_), "MPI_Comm_size");
    MPI_Comm_free(&host);
  }
  ~MpiComm() override {
    if (!pending_.empty())
      MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    int done = 0;
    MPI_Finalized(&done);
    if (owns_init_ && !done) MPI_Finalize();
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void start_sum(float* data, size_t n) override {
    // MPI counts are ints: a larger buffer goes as several reductions.
    for (size_t done = 0; done < n;) {
      const size_t k = std::min<size_t>(n - done, INT_MAX);
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + done, static_cast<int>(k), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD, &r),
            "MPI_Iallreduce");
      pending_.push_back(r);
      done += k;
    }
  }
  void progress() override {
    if (pending_.empty()) return;
    int flag = 0;
    check(
        MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &flag, MPI_STATUSES_IGNORE),
        "MPI_Testall");
    if (flag) pending_.clear();
  }
  void finish() override {
    if (pending_.empty()) return;
    const int rc =
        MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    pending_.clear();
    check(rc, "MPI_Waitall (the gradient sums)");
  }
  void sum(double* data, size_t n) override {
    for (size_t done = 0; done < n;) {
      const size_t k = std::min<size_t>(n - done, INT_MAX);
      check(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(k), MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
      done += k;
    }
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    ::_exit(code);  // MPI_Abort does not return; should it, end this rank anyway
  }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool owns_init_ = false;
  std::vector<MPI_Request> pending_;
};

}  // namespace

std::string mpi_missing() { return ""; }

std::unique_ptr<Comm> make_mpi_comm() { return std::make_unique<MpiComm>(); }

}  // namespace forge::dist::detail
