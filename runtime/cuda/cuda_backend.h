// The CUDA backend: one device (--device cuda:N), one compute stream on which every kernel,
// copy and library call of an executable is issued in order, a caching allocator
// (runtime/caching_allocator.h: size-class bins, stream-ordered reuse, no cudaMalloc in
// the steady state), pinned host staging for copies, CUDA events to time nodes, and the
// library handles kernels share (cuBLASLt, cuDNN), all bound to that stream.
//
// Kernels reach it through ops/cuda/context.h. Compiled only with CAMPO_HAVE_CUDA; the rest
// of the runtime sees a Backend (runtime/backend.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>

#include "runtime/backend.h"
#include "runtime/caching_allocator.h"

namespace campo::cuda {

// Also a CachingAllocatorOwner, so device-neutral code reaches the allocator's statistics.
class CudaBackend : public Backend, public CachingAllocatorOwner {
 public:
  // Selects device `index` and creates the stream and handles; one error line for a missing
  // or too-old driver, no device, or an index out of range.
  explicit CudaBackend(int index);
  ~CudaBackend() override;

  DeviceSpec device() const override { return {Device::cuda, index_}; }
  Device kernel_device() const override { return Device::cuda; }
  std::string describe() const override;
  bool emulates_low_precision() const override { return false; }

  std::shared_ptr<void> allocate(size_t bytes) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill_zero(const Tensor& t) override;
  void synchronize() override;
  std::unique_ptr<NodeTimer> make_timer(size_t slots) override;

  int index() const { return index_; }
  // major * 10 + minor: 90 on Hopper, 70 on Volta.
  int compute_capability() const { return compute_capability_; }
  int multiprocessors() const { return multiprocessors_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  CachingAllocator& allocator() override { return *allocator_; }

 private:
  int index_ = 0;
  int compute_capability_ = 0;
  int multiprocessors_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace campo::cuda
