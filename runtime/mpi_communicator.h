// Internal to runtime/: what Open MPI's communicator (runtime/mpi_communicator.cc) gives NCCL's
// (runtime/cuda/nccl_communicator.cc, which composes it). The error lines every communicator
// shares are runtime/collective_errors.h's. Everything else includes runtime/communicator.h.
#pragma once

#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace campo::detail {

#if CAMPO_HAVE_MPI
// MPI's ranks over host memory (runtime/mpi_communicator.cc): MPI and the communication
// thread are started on first use, once per process.
std::shared_ptr<Communicator> make_mpi_host_communicator();
// Writes `line` to stderr and ends every rank (MPI_Abort, issued by the communication thread,
// which owns every MPI call); never returns. For collectives that MPI does not carry (NCCL's).
[[noreturn]] void end_job(const std::string& line);
#endif

#if CAMPO_HAVE_NCCL
// Open MPI for the host collectives, NCCL for CUDA buckets (runtime/cuda/nccl_communicator.cc),
// on the current CUDA device.
std::shared_ptr<Communicator> make_nccl_communicator();
#endif

}  // namespace campo::detail
