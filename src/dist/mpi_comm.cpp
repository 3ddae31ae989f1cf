// dist/job.h over MPI (Debian's Open MPI): the world communicator, non-blocking in-place
// sums for gradient buckets, and errors as forge::Error instead of MPI's abort.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <deque>
#include <string>

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
    if (in_flight_ != MPI_REQUEST_NULL) MPI_Wait(&in_flight_, MPI_STATUS_IGNORE);
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

  // One reduction in flight at a time, the others queued: with several in flight, Open MPI
  // 4.1's non-blocking reductions ran 10-40x slower on the development VM
  // (docs/PERFORMANCE.md); one at a time they run at the blocking ones' speed.
  void start_sum(float* data, size_t n) override {
    // MPI counts are ints: a larger buffer goes as several reductions.
    for (size_t done = 0; done < n;) {
      const size_t k = std::min<size_t>(n - done, INT_MAX);
      queued_.push_back({data + done, k});
      done += k;
    }
    if (in_flight_ == MPI_REQUEST_NULL) launch_next();
  }
  void progress() override {
    if (in_flight_ == MPI_REQUEST_NULL) return;
    int flag = 0;
    check(MPI_Test(&in_flight_, &flag, MPI_STATUS_IGNORE), "MPI_Test (a gradient sum)");
    if (flag) launch_next();
  }
  void finish() override {
    while (in_flight_ != MPI_REQUEST_NULL) {
      check(MPI_Wait(&in_flight_, MPI_STATUS_IGNORE), "MPI_Wait (a gradient sum)");
      launch_next();
    }
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
  void broadcast(void* data, size_t bytes, int root) override {
    if (bytes > INT_MAX) throw Error(ErrorKind::Range, "dist: a broadcast of over 2 GiB");
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    ::_exit(code);  // MPI_Abort does not return; should it, end this rank anyway
  }

 private:
  struct Sum {
    float* data;
    size_t n;
  };
  void launch_next() {
    if (queued_.empty()) return;
    const Sum s = queued_.front();
    queued_.pop_front();
    check(MPI_Iallreduce(MPI_IN_PLACE, s.data, static_cast<int>(s.n), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD, &in_flight_),
          "MPI_Iallreduce (a gradient sum)");
  }

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool owns_init_ = false;
  std::deque<Sum> queued_;
  MPI_Request in_flight_ = MPI_REQUEST_NULL;
};

}  // namespace

std::string mpi_missing() { return ""; }

std::unique_ptr<Comm> make_mpi_comm() { return std::make_unique<MpiComm>(); }

}  // namespace forge::dist::detail
