// forge/dist.h: job(), the single-process job, and the launcher's environment.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "dist/job.h"
#include "forge/error.h"

namespace forge::dist {
namespace {

/// Rank 0 of 1: every reduction is the identity.
class Solo final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void start_sum(float*, size_t) override {}
  void progress() override {}
  void finish() override {}
  void sum(double*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { ::_exit(code); }
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 && n < (1 << 20) ? static_cast<int>(n) : 0;
}

}  // namespace

namespace detail {

int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const int n = env_int(name); n > 0) return n;
  return 0;
}

}  // namespace detail

Comm& job() {
  // Made once; destroyed (MPI finalized) at exit.
  static const std::unique_ptr<Comm> comm = []() -> std::unique_ptr<Comm> {
    const int n = detail::launcher_size();
    if (n <= 1) return std::make_unique<Solo>();
    if (const std::string why = detail::mpi_missing(); !why.empty())
      throw Error(ErrorKind::Unsupported, "dist: an MPI launcher started this process as one of " +
                                              std::to_string(n) + " ranks, but " + why);
    return detail::make_mpi_comm();
  }();
  return *comm;
}

std::string mpi_unavailable_reason() { return detail::mpi_missing(); }

int launcher_local_size() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const int n = env_int(name); n > 0) return n;
  return 0;
}

}  // namespace forge::dist
