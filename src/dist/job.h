// The pieces of forge/dist.h's job() that depend on the build: mpi_comm.cpp with MPI,
// no_mpi.cpp without.
#pragma once

#include <memory>
#include <string>

#include "forge/dist.h"

namespace forge::dist::detail {

/// The ranks an MPI launcher announced in this process's environment (Open MPI's
/// OMPI_COMM_WORLD_SIZE, MPICH's PMI_SIZE), or 0 when no launcher started it.
int launcher_size();

/// A Comm over MPI's world (MPI initialized here, finalized when it is destroyed); Error when
/// this build has no MPI.
std::unique_ptr<Comm> make_mpi_comm();

/// "" when this build has MPI, else why not.
std::string mpi_missing();

}  // namespace forge::dist::detail
