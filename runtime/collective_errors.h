// Internal to runtime/: what every communicator (runtime/communicator.cc's single one,
// runtime/mpi_communicator.cc's Open MPI one, runtime/cuda/nccl_communicator.cc's NCCL one)
// says when a collective goes wrong, so that a mistake or a hang reads the same whichever
// moves the data. Below the communicators: it knows none of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/dtype.h"

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

}  // namespace campo::detail
