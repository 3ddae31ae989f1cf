// dist/job.h for a build without MPI: every job is one process.
#include "dist/job.h"
#include "forge/error.h"

namespace forge::dist::detail {

std::string mpi_missing() {
  return "this forge was built without MPI (install libopenmpi-dev, scripts/setup.sh does, "
         "and rebuild)";
}

std::unique_ptr<Comm> make_mpi_comm() {
  throw Error(ErrorKind::Unsupported, "dist: " + mpi_missing());
}

}  // namespace forge::dist::detail
