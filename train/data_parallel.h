// Data-parallel training (`mpirun -np N campo train ... --data-parallel`, docs/usage.md):
// every rank builds the same static training graph, whose gradients are averaged over the
// ranks in buckets (TrainingGraphSpec::data_parallel, AllReduceStart / AllReduceWait); rank r
// trains on the r-th piece of each global batch of N x --batch samples (DataLoader's
// shards), so that N ranks take the steps one process would take with a batch of N x
// --batch (but for batch norm, whose statistics are each rank's own, as in PyTorch's DDP);
// rank 0 writes what the run writes (progress, checkpoints, --metrics, the JSON line).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace campo {

class VariableStore;

// --data-parallel, --bucket-mb, --comm-timeout.
struct DataParallelOptions {
  bool enabled = false;
  double bucket_mb = 25;   // gradient bucket size (PyTorch DDP's default)
  double timeout_s = 600;  // a collective waiting longer for the other ranks ends the job
};
// The numbers are in range.
void validate(const DataParallelOptions& d);

// A session's ranks: gradients averaged over comm's ranks in buckets of bucket_bytes; no
// communicator: not data-parallel.
struct DataParallelRun {
  std::shared_ptr<Communicator> comm;
  int64_t bucket_bytes = int64_t(25) << 20;
  bool on() const { return comm != nullptr; }
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
};

// The ranks of the run: MPI's under an MPI launcher (one error line where this build has no
// MPI), else this process alone; with d's timeout.
std::shared_ptr<Communicator> join_ranks(const DataParallelOptions& d, Device device);

// The device of this rank: under --data-parallel (`dp`), --device cuda[:N] gives the rank
// of local rank L (its index among the ranks of its machine) GPU N + L; the CPU is every
// rank's. Not data-parallel: `device` as given.
DeviceSpec rank_device(const DeviceSpec& device, const DataParallelOptions& dp);

// The ranks `comm` with d's bucket size (--bucket-mb).
DataParallelRun data_parallel_run(std::shared_ptr<Communicator> comm, const DataParallelOptions& d);

// Refuses --data-parallel for a model with two step graphs (dcgan), in one line.
void check_data_parallel_model(const DataParallelOptions& d, const std::string& model);

// Every variable (parameters, buffers, optimizer state) of every rank becomes rank 0's.
void broadcast_variables(Communicator& comm, VariableStore& vars);

// Refuses a run whose ranks differ: `what` (the training graph as text and the options
// that shape the run) hashed on each rank and compared; one error line naming the ranks
// that differ from rank 0.
void check_ranks_agree(Communicator& comm, const std::string& what);

// The result JSON's "communication" of `steps` steps whose gradient buckets cost `cost`
// (a difference of Communicator::Stats): per step, the buckets, their bytes, the
// milliseconds the step waited for them and (null where `comm` cannot time them) their
// reductions took.
nlohmann::json communication_json(const Communicator& comm, const Communicator::Stats& cost,
                                  double steps);

// The mean over the ranks of `n` floats at `values`, in place.
void average_over_ranks(Communicator& comm, float* values, int64_t n);

}  // namespace campo
