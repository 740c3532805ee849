// The "mpi+nccl" communicator (make_mpi_communicator(Device::cuda)): Open MPI's ranks for the
// host collectives (the MPI communicator, composed), NCCL for gradient buckets in GPU
// memory. Rank 0's NCCL id reaches the others through MPI's broadcast; the NCCL
// communicator is on the current CUDA device (the caller's backend has set it: one device
// per rank) and has a stream of its own.
//
// A CUDA bucket's sum (start_all_reduce): an event recorded on the caller's stream orders
// NCCL's stream after the work that wrote the bucket; ncclAllReduce (f32, sum, in place) runs
// there, and the ticket's done-event is recorded after it. finish() makes the caller's stream
// wait for that event: the host does not wait. A watcher thread queries the done-events of
// the reductions in flight every kWatchInterval, so that one taking longer than timeout()
// (a rank died or hangs) ends the job with the same line as MPI's collectives. Events are
// reused once a reduction is both finished and seen complete.
//
// Compiled only with CUDA (runtime/cuda/), and holds code only with NCCL (CAMPO_HAVE_NCCL,
// which CMakeLists.txt defines only with MPI as well).
#include "runtime/mpi_communicator.h"

#if CAMPO_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/check.h"
#include "runtime/collective_errors.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_info.h"

// As CAMPO_CUDA_CHECK (runtime/cuda/cuda_check.h), with NCCL's error string.
#define CAMPO_NCCL_CHECK(expr)                                          \
  do {                                                                  \
    const ncclResult_t campo_nccl_status_ = (expr);                     \
    if (campo_nccl_status_ != ncclSuccess)                              \
      ::campo::cuda::fail_call(__FILE__, __LINE__, #expr, "NCCL",       \
                               ncclGetErrorString(campo_nccl_status_)); \
  } while (0)

namespace campo {
namespace {

using Clock = std::chrono::steady_clock;

// How often the watcher queries the done-events in flight (it sleeps when none is).
constexpr std::chrono::milliseconds kWatchInterval{1};

// For the destructor, which must not throw.
void warn_on_error(cudaError_t status, const char* call) noexcept {
  if (status == cudaSuccess || status == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "campo: warning: %s failed: %s\n", call, cudaGetErrorString(status));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> host, int device)
      : host_(std::move(host)), device_(device) {
    try {
      ncclUniqueId id{};
      if (host_->rank() == 0) CAMPO_NCCL_CHECK(ncclGetUniqueId(&id));
      host_->broadcast(&id, sizeof id, 0);
      CAMPO_NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()));
      CAMPO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    } catch (...) {
      release_resources();
      throw;
    }
    watcher_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    warn_on_error(cudaSetDevice(device_), "cudaSetDevice");
    // The reductions still queued end first (or, should one hang, the watcher ends the job).
    if (stream_) warn_on_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    watcher_.join();
    release_resources();
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string transport() const override { return "mpi+nccl"; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    host_->set_timeout(timeout());
    host_->all_reduce(data, count, dtype, op);
  }
  void broadcast(void* data, size_t bytes, int root) override {
    host_->set_timeout(timeout());
    host_->broadcast(data, bytes, root);
  }
  void all_gather(const void* mine, void* all, size_t bytes) override {
    host_->set_timeout(timeout());
    host_->all_gather(mine, all, bytes);
  }

  CommTicket start_all_reduce(float* data, int64_t count, Device device, void* stream) override {
    if (device != Device::cuda) {  // a host bucket: MPI's
      host_->set_timeout(timeout());
      const CommTicket on_host = host_->start_all_reduce(data, count, device, stream);
      std::lock_guard<std::mutex> lock(mu_);
      Reduction r;
      r.on_host = true;
      r.host_ticket = on_host;
      reductions_.emplace(next_ticket_, r);
      return next_ticket_++;
    }
    CAMPO_CHECK(count >= 0, "all-reduce of ", count, " elements");
    CAMPO_CHECK(count == 0 || data, "all-reduce of ", count, " elements at a null pointer");
    const auto caller = static_cast<cudaStream_t>(stream);
    CommTicket ticket;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Reduction r;
      r.done = take_event();
      r.timeout = timeout();
      r.deadline = Clock::now() + r.timeout;
      // ready_ is shared by every start: its record and the wait on it go together.
      CAMPO_CUDA_CHECK(cudaEventRecord(ready_, caller));
      CAMPO_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
      if (count > 0)
        CAMPO_NCCL_CHECK(
            ncclAllReduce(data, data, size_t(count), ncclFloat32, ncclSum, comm_, stream_));
      CAMPO_CUDA_CHECK(cudaEventRecord(r.done, stream_));
      ticket = next_ticket_++;
      reductions_.emplace(ticket, r);
      ++unseen_;
    }
    wake_.notify_one();
    return ticket;
  }

  void finish(CommTicket ticket, void* stream) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = reductions_.find(ticket);
    CAMPO_CHECK(it != reductions_.end() && !it->second.finished, "internal: finish() of ticket ",
                ticket, ", which is not in flight (never started, or finished already)");
    if (it->second.on_host) {
      const CommTicket on_host = it->second.host_ticket;
      reductions_.erase(it);
      lock.unlock();
      host_->finish(on_host, stream);
      return;
    }
    CAMPO_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), it->second.done, 0));
    it->second.finished = true;
    if (it->second.complete) release(it);
  }

 private:
  struct Reduction {
    bool on_host = false;        // a host bucket, reduced by the MPI communicator
    CommTicket host_ticket = 0;  // its ticket there
    cudaEvent_t done = nullptr;  // recorded on stream_ after the reduction
    bool finished = false;       // finish() has ordered the caller's stream after it
    bool complete = false;       // the watcher has seen `done` happen
    std::chrono::milliseconds timeout{0};
    Clock::time_point deadline;
  };
  using Reductions = std::unordered_map<CommTicket, Reduction>;

  // Under mu_.
  cudaEvent_t take_event() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  // Under mu_: a reduction finished and complete gives its event back.
  Reductions::iterator release(Reductions::iterator it) {
    free_events_.push_back(it->second.done);
    return reductions_.erase(it);
  }

  // The watcher thread.
  void watch() {
    warn_on_error(cudaSetDevice(device_), "cudaSetDevice");
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      const Clock::time_point now = Clock::now();
      for (auto it = reductions_.begin(); it != reductions_.end();) {
        Reduction& r = it->second;
        if (r.on_host || r.complete) {
          ++it;
          continue;
        }
        const cudaError_t status = cudaEventQuery(r.done);
        if (status == cudaErrorNotReady) {
          if (now > r.deadline) {
            const std::string line = detail::timeout_line(host_->rank(), host_->size(),
                                                          "gradient all-reduce (NCCL)", r.timeout);
            lock.unlock();
            detail::end_job(line);
          }
          ++it;
          continue;
        }
        // Done, or failed: CUDA's errors are sticky, and the caller's next check reports it.
        r.complete = true;
        --unseen_;
        it = r.finished ? release(it) : std::next(it);
      }
      if (unseen_ > 0)
        wake_.wait_for(lock, kWatchInterval, [&] { return stopping_; });
      else
        wake_.wait(lock, [&] { return stopping_ || unseen_ > 0; });
    }
  }

  void release_resources() noexcept {
    for (auto& [ticket, r] : reductions_)
      if (r.done) warn_on_error(cudaEventDestroy(r.done), "cudaEventDestroy");
    reductions_.clear();
    for (cudaEvent_t e : free_events_) warn_on_error(cudaEventDestroy(e), "cudaEventDestroy");
    free_events_.clear();
    if (ready_) warn_on_error(cudaEventDestroy(ready_), "cudaEventDestroy");
    ready_ = nullptr;
    if (comm_) {
      const ncclResult_t status = ncclCommDestroy(comm_);
      if (status != ncclSuccess)
        std::fprintf(stderr, "campo: warning: ncclCommDestroy failed: %s\n",
                     ncclGetErrorString(status));
    }
    comm_ = nullptr;
    if (stream_) warn_on_error(cudaStreamDestroy(stream_), "cudaStreamDestroy");
    stream_ = nullptr;
  }

  std::shared_ptr<Communicator> host_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the caller's stream by each start

  std::mutex mu_;
  std::condition_variable wake_;  // the watcher: a reduction started, or stop
  Reductions reductions_;         // started and not both finished and complete
  std::vector<cudaEvent_t> free_events_;
  CommTicket next_ticket_ = 0;
  int64_t unseen_ = 0;  // CUDA reductions the watcher has not seen complete
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace

namespace detail {

std::shared_ptr<Communicator> make_nccl_communicator() {
  // The device first: without one, this is one line, before MPI starts.
  CAMPO_CHECK(cuda::device_count() > 0,
              "--data-parallel on cuda: no CUDA device is present (no GPU, or no driver for "
              "it), so NCCL has nothing to reduce on; use --device cpu");
  int device = 0;
  CAMPO_CUDA_CHECK(cudaGetDevice(&device));
  return std::make_shared<NcclCommunicator>(make_mpi_host_communicator(), device);
}

}  // namespace detail
}  // namespace campo
#endif  // CAMPO_HAVE_NCCL
