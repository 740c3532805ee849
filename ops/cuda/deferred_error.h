// An error a CUDA kernel finds in its data (an out-of-range label, a step count below 1),
// reported without making the host wait inside a step: the kernel records a 64-bit code in
// a device word with atomicMin (the smallest code wins: put the row or index in the high
// bits to report the first one; the word is never reset, so an error stays reported), the
// word is copied behind the kernel into pinned host memory (copy(), in the kernel's run(), so
// a captured step replays it), an event is recorded behind the step (mark(), in after_run),
// and a later step's before_run reads the word once that event has passed (found():
// cudaEventQuery, no waiting) and throws. The run that found the error still completes; its
// kernel writes NaN where the CPU would have thrown, so that step's results show it at once.
// Included by ops/cuda/ only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "ops/cuda/context.h"

namespace campo::cuda {

class DeferredError {
 public:
  static constexpr uint64_t kNone = ~uint64_t(0);

  explicit DeferredError(ExecContext& ctx) : device_(cuda_backend(ctx).allocate(sizeof(uint64_t))) {
    void* host = nullptr;
    CAMPO_CUDA_CHECK(cudaHostAlloc(&host, sizeof(uint64_t), cudaHostAllocDefault));
    host_.reset(static_cast<uint64_t*>(host));
    *host_ = kNone;
    CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    cudaStream_t stream = cuda_stream(ctx);
    CAMPO_CUDA_CHECK(cudaMemsetAsync(device_.get(), 0xff, sizeof(uint64_t), stream));
    CAMPO_CUDA_CHECK(cudaStreamSynchronize(stream));  // construction time, not a step
  }
  ~DeferredError() { cudaEventDestroy(copied_); }
  DeferredError(const DeferredError&) = delete;
  DeferredError& operator=(const DeferredError&) = delete;

  // The address kernels report to.
  unsigned long long* device_word() const {
    return static_cast<unsigned long long*>(device_.get());
  }
  // In run(), after the kernel: copies the word to the host behind it.
  void copy(cudaStream_t stream) {
    CAMPO_CUDA_CHECK(cudaMemcpyAsync(host_.get(), device_.get(), sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, stream));
  }
  // In after_run (never while capturing: an event recorded then is not one the host can
  // query): marks the copy's end on the queue.
  void mark(cudaStream_t stream) {
    CAMPO_CUDA_CHECK(cudaEventRecord(copied_, stream));
    pending_ = true;
  }
  // The code a finished earlier run recorded, if any; nullopt also while the last copy is
  // still on its way (never waits).
  std::optional<uint64_t> found() {
    if (!pending_) return std::nullopt;
    const cudaError_t status = cudaEventQuery(copied_);
    if (status == cudaErrorNotReady) return std::nullopt;
    CAMPO_CUDA_CHECK(status);
    if (*host_ == kNone) return std::nullopt;
    return *host_;
  }

 private:
  struct FreeHost {
    void operator()(uint64_t* p) const { cudaFreeHost(p); }
  };
  std::shared_ptr<void> device_;
  std::unique_ptr<uint64_t, FreeHost> host_;
  cudaEvent_t copied_ = nullptr;
  bool pending_ = false;
};

}  // namespace campo::cuda
