// The CUDA backend: one device (--device cuda:N), one compute stream on which every kernel,
// copy and library call of an executable is issued in order, a caching allocator
// (runtime/caching_allocator.h: blocks split from and merged within segments, stream-ordered
// reuse, no cudaMalloc in the steady state), pinned host staging for copies, CUPTI's activity
// records (or CUDA events) to time nodes, and the library handles kernels share (cuBLASLt, cuDNN),
// all bound to that stream.
//
// Kernels reach it through ops/cuda/context.h. Compiled only with CAMPO_HAVE_CUDA; the rest
// of the runtime sees a Backend (runtime/backend.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/caching_allocator.h"
#include "runtime/conv_algo_cache.h"
#include "runtime/pci_device.h"

namespace campo::cuda {

// Also a CachingAllocatorOwner, so device-neutral code reaches the allocator's statistics,
// and a PciDevice, so NVML (runtime/nvml_energy.h) finds the same GPU.
class CudaBackend : public Backend, public CachingAllocatorOwner, public PciDevice {
 public:
  // Selects device `index` (which must exist: make_backend's factory checks the driver, the
  // device count and the compute capability first, each with one error line) and creates the
  // stream, the handles, the allocator and the staging buffers.
  explicit CudaBackend(int index);
  ~CudaBackend() override;

  DeviceSpec device() const override { return {Device::cuda, index_}; }
  Device kernel_device() const override { return Device::cuda; }
  std::string describe() const override;
  // kind "cuda"; gpu (the device name), compute_capability ("9.0"), multiprocessors (a MIG
  // instance of a GPU has fewer under the same name); the versions: driver (the newest CUDA
  // it supports), cuda_runtime, cudnn and cublaslt (the libraries loaded, not the headers).
  BackendIdentity identity() const override;
  bool emulates_low_precision() const override { return false; }
  // cuDNN and cuBLAS run f16/bf16 on tensor cores when channels (and GEMM K/N) are multiples
  // of 8 elements (16 bytes); otherwise they pad internally or take slower kernels (cuDNN's
  // legacy API guide, "Tensor Core Operations").
  int padding_alignment() const override { return 8; }

  std::shared_ptr<void> allocate(size_t bytes) override;
  std::optional<size_t> available_memory() const override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill_zero(const Tensor& t) override;
  // A ring of pinned slots of kQueuedCopyMax bytes: the value is copied into the next slot,
  // an asynchronous copy from it is issued on the compute stream and an event recorded
  // behind it; a slot is written again only once its event has passed (a wait only when
  // kQueuedSlots copies are still queued). No stream synchronization.
  void queue_copy_from_host(const Tensor& dst, const void* src) override;
  static constexpr size_t kQueuedSlots = 64;
  // Waits for the compute stream and the upload stream.
  void synchronize() override;
  // Uploads run on a second stream from pinned buffers of their own, so the next batch's
  // copy overlaps the step on the compute stream; landing them is a stream wait and
  // device-to-device copies, no host synchronization.
  bool overlaps_uploads() const override { return true; }
  void upload(const Tensor& staged, const void* src) override;
  void land_uploads(const std::vector<UploadCopy>& copies) override;
  // CUPTI's kernel activity (runtime/cuda/cupti_timer.h); CUDA events where CUPTI cannot
  // record, with the reason kept for node_timer_source().
  std::unique_ptr<NodeTimer> make_timer(size_t slots) override;
  std::string node_timer_source() const override;
  // CUPTI's range profiler (runtime/cuda/cupti_counters.h), where the driver lets it read;
  // a refusal is kept, so that later steps do not ask again.
  std::string counters_unavailable() const override { return counters_refused_; }
  // CUPTI sizes its counter data by the ranges of a pass, and its SetConfig is reported to
  // fail beyond a few thousand: a large training step is read 512 nodes at a time.
  size_t counter_slots_at_once() const override { return 512; }
  std::unique_ptr<NodeCounterReader> make_counter_reader(size_t slots, std::string& why) override;
  // CUDA graphs: stream capture of the compute stream, instantiated once, launched per replay.
  std::string capture_unsupported() const override;
  void begin_capture() override;
  std::unique_ptr<CapturedWork> end_capture() override;
  void abort_capture() noexcept override;

  int index() const { return index_; }
  // major * 10 + minor: 90 on Hopper, 75 on Turing (the oldest CUDA 13 builds for).
  int compute_capability() const { return compute_capability_; }
  int multiprocessors() const { return multiprocessors_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  CachingAllocator& allocator() override { return *allocator_; }
  // The cuDNN convolution algorithms chosen on this device (ops/cuda/conv.cc), shared by
  // every executable built on this backend; counts() says how many were measured and how
  // many were reused.
  ConvAlgoCache& conv_algos() { return conv_algos_; }
  const ConvAlgoCache* conv_algo_cache() const override { return &conv_algos_; }
  std::string pci_bus_id() const override { return pci_bus_id_; }

 private:
  int index_ = 0;
  int compute_capability_ = 0;
  int multiprocessors_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
  ConvAlgoCache conv_algos_;
  std::string name_;
  std::string pci_bus_id_;
  size_t total_memory_ = 0;
  int driver_version_ = 0;
  std::string node_timer_source_;  // of the last make_timer; empty before the first
  std::string counters_refused_;   // why CUPTI refused a counter reader; empty before
  struct Staging;                  // pinned host buffers of the copies
  std::unique_ptr<Staging> staging_;
  struct Uploads;  // the upload stream, its pinned buffers and events
  std::unique_ptr<Uploads> uploads_;
  struct QueuedCopies;  // the pinned ring of queue_copy_from_host
  std::unique_ptr<QueuedCopies> queued_;

  void use_device() const;  // cudaSetDevice(index_): calls may come from any thread
  void release() noexcept;  // the destructor's work, also on a failed construction
};

}  // namespace campo::cuda
