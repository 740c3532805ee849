// Internal to runtime/: what the communicators (runtime/communicator.cc, the single one;
// runtime/mpi_communicator.cc, Open MPI's; runtime/cuda/nccl_communicator.cc, NCCL's, which
// composes the MPI one) share. Everything else includes runtime/communicator.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace campo::detail {

// The checks every communicator makes of a blocking all_reduce's arguments, so that a
// mistake is the same error line in a one-process run as under mpirun: count >= 0, data
// not null when count > 0, dtype f32, i32 or i64.
void check_host_all_reduce(const void* data, int64_t count, DType dtype);

// The line that ends a job whose collective waited too long, e.g. "campo: rank 1 of 2: the
// gradient all-reduce waited more than 5 s for the other ranks (one of them died or hangs);
// ending the job". `what` names the collective.
std::string timeout_line(int rank, int size, const std::string& what,
                         std::chrono::milliseconds timeout);

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
