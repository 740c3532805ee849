// The processes of a data-parallel run (`mpirun -np N campo train ... --data-parallel`): how
// many there are, which one this is, and the collectives a training step needs. Built on
// existing engines, not a transport of our own: Open MPI starts the processes and reduces
// host memory (a communication thread of its own, so that a gradient bucket's reduction
// overlaps the rest of the backward pass); NCCL reduces GPU memory on a stream of its own,
// its id exchanged through MPI. Without a launcher a run is one process: the "single"
// communicator, whose collectives leave the data as it is.
//
// Every collective is started in the same order on every rank (the training graph's
// schedule is the same everywhere: a hash of it is compared at start). A collective that
// waits longer than timeout() for the other ranks (one died or hangs) ends the whole job
// with one line naming this rank and what it waited for, instead of hanging.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace campo {

enum class ReduceOp : uint8_t { sum, max, min };

// A gradient bucket's reduction, from start_all_reduce to finish.
using CommTicket = int64_t;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What moves the data: "single", "mpi" or "mpi+nccl" (the JSON result and the banner).
  virtual std::string transport() const = 0;

  // Blocking collectives over host memory, for what a run exchanges outside the step's
  // kernels (the start-up checks, the initial weights, the reported loss, evaluation
  // counts). `count` elements of `dtype`: f32, i32 or i64 (MPI has no sum of f16 or bf16;
  // another dtype is an error line).
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  // `bytes` at `data` on every rank become root's.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Rank r's `bytes` at `mine` land at all + r * bytes on every rank.
  virtual void all_gather(const void* mine, void* all, size_t bytes) = 0;

  // A gradient bucket: the sum over ranks of `count` f32 elements at `data`, in place.
  // `device` says whose memory `data` is: Device::cpu host memory, Device::cuda the
  // current CUDA device's, the reduction ordered after the work already queued on `stream`
  // (a cudaStream_t; null on the CPU). Returns at once: the reduction runs while the caller
  // goes on; finish() is where its result is needed.
  virtual CommTicket start_all_reduce(float* data, int64_t count, Device device, void* stream) = 0;
  // After this the bucket holds the sum: on the CPU it blocks the caller until then; on
  // CUDA it orders `stream`'s next work after the reduction (the host does not wait).
  virtual void finish(CommTicket ticket, void* stream) = 0;

  // How long a collective waits for the other ranks before the job is ended.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // What the gradient buckets of this process have cost so far, as the step's kernels
  // (AllReduceWait) count it: buckets finished, their bytes, and the time the step was
  // blocked waiting for them (on the CPU; a CUDA step does not block the host); and, where
  // the communicator can time them (MPI: reduce_timed), the seconds from each bucket's
  // start on the communication thread to its end (its transfer, and waiting for the other
  // ranks to reach it). The train and bench JSON's "communication" and bench/scaling.py's
  // alpha-beta fit read them.
  struct Stats {
    int64_t buckets = 0;
    int64_t bytes = 0;
    double wait_seconds = 0;
    double reduce_seconds = 0;
    // What a stretch of steps cost: the counts at its end minus those at its start.
    Stats operator-(const Stats& start) const {
      return {buckets - start.buckets, bytes - start.bytes, wait_seconds - start.wait_seconds,
              reduce_seconds - start.reduce_seconds};
    }
    Stats& operator+=(const Stats& more) {
      buckets += more.buckets;
      bytes += more.bytes;
      wait_seconds += more.wait_seconds;
      reduce_seconds += more.reduce_seconds;
      return *this;
    }
  };
  virtual bool reduce_timed() const { return false; }
  Stats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }
  void count_bucket(int64_t bytes, double wait_seconds) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.buckets;
    stats_.bytes += bytes;
    stats_.wait_seconds += wait_seconds;
  }
  void count_reduction(double seconds) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.reduce_seconds += seconds;
  }

 private:
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};
  mutable std::mutex stats_mu_;
  Stats stats_;
};

// One process alone: rank 0 of 1.
std::shared_ptr<Communicator> make_single_communicator();

// Whether this build has Open MPI (CMake option CAMPO_MPI), and NCCL with it.
bool mpi_built_in();
bool nccl_built_in();
// Whether this process was started by an MPI launcher (mpirun / mpiexec set
// OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE), so that --data-parallel has ranks to join.
bool launched_by_mpi();

// The communicator of a data-parallel run whose gradients live on `device`: MPI's ranks
// (initialised here, once per process; finalised at exit), with NCCL for Device::cuda (on
// the current CUDA device, which the caller has set). One error line where this build has
// no MPI (or no NCCL for cuda), and where MPI or NCCL cannot start. In a process that no
// launcher started, Open MPI's singleton start makes it rank 0 of 1.
//
// Exit (runtime/mpi_communicator.cc): a process that exits with status 0 meets the other
// ranks (within timeout()) and finalises MPI; one that exits with another status does not
// finalise, so that mpirun ends the other ranks at once, reporting that status, instead of
// leaving them to wait in a collective for timeout().
std::shared_ptr<Communicator> make_mpi_communicator(Device device);

}  // namespace campo
