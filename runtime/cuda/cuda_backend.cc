// The CUDA backend (runtime/cuda/cuda_backend.h) and its registration: the only place besides
// --version (tools/cli.cc) that knows whether the build has CUDA, because this file is
// compiled only when it has (CAMPO_HAVE_CUDA; CMakeLists.txt's runtime/cuda glob). Without
// it, make_backend says the build has no CUDA backend.
//
// Everything is issued on one non-blocking stream, in order: kernels, library calls, copies,
// memsets, timing events. That order is what makes the caching allocator's immediate reuse
// of freed blocks safe (runtime/caching_allocator.h). Host copies go through pinned staging
// buffers (real DMA, overlapped with the host memcpy in two halves) and return when the data
// is in place, as the Backend interface promises. Per-step values (queue_copy_from_host: a
// learning rate, the step, the loss scale) go through a ring of pinned slots instead, in
// stream order with no host wait, so feeding them does not drain the stream; they are fed
// before a step runs, never while one is being captured (a slot would then be read at
// every replay).
//
// Error handling: every CUDA, cuBLAS and cuDNN call is checked (runtime/cuda/cuda_check.h)
// and throws, except in destructors and memory deleters, which must not throw: there a
// failure is printed as a warning and otherwise ignored.
#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cupti_counters.h"
#include "runtime/cuda/cupti_timer.h"
#include "runtime/cuda/device_info.h"

namespace campo {
namespace cuda {
namespace {

// CUDA's version numbers (1000 * major + 10 * minor) as "13.0".
std::string version_str(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// For destructors and deleters, which must not throw. cudaErrorCudartUnloading (memory
// freed by static destructors after the runtime has shut down) is expected and silent.
void warn_on_error(cudaError_t status, const char* call) noexcept {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  if (status == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "campo: warning: %s failed: %s\n", call, cudaGetErrorString(status));
}

void check_device_tensor(const Tensor& t, const char* what) {
  CAMPO_CHECK(t.device() == Device::cuda, what, ": a ", device_name(t.device()),
              " tensor given to the CUDA backend");
}

// Times nodes with a pair of events per slot, recorded on the backend's stream.
class CudaNodeTimer final : public NodeTimer {
 public:
  CudaNodeTimer(cudaStream_t stream, size_t slots)
      : stream_(stream),
        starts_(slots, nullptr),
        stops_(slots, nullptr),
        timed_(slots, false),
        ms_(slots, 0.0) {
    try {
      for (size_t i = 0; i < slots; ++i) {
        CAMPO_CUDA_CHECK(cudaEventCreate(&starts_[i]));
        CAMPO_CUDA_CHECK(cudaEventCreate(&stops_[i]));
      }
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~CudaNodeTimer() override { destroy(); }

  void start(size_t slot) override {
    CAMPO_CUDA_CHECK(cudaEventRecord(starts_.at(slot), stream_));
    timed_[slot] = false;
  }
  void stop(size_t slot) override {
    CAMPO_CUDA_CHECK(cudaEventRecord(stops_.at(slot), stream_));
    timed_[slot] = true;
  }
  const std::vector<double>& elapsed_ms() override {
    CAMPO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (size_t i = 0; i < ms_.size(); ++i) {
      if (!timed_[i]) continue;
      float ms = 0;
      CAMPO_CUDA_CHECK(cudaEventElapsedTime(&ms, starts_[i], stops_[i]));
      ms_[i] = ms;
    }
    return ms_;
  }

 private:
  void destroy() noexcept {
    for (cudaEvent_t e : starts_)
      if (e) warn_on_error(cudaEventDestroy(e), "cudaEventDestroy");
    for (cudaEvent_t e : stops_)
      if (e) warn_on_error(cudaEventDestroy(e), "cudaEventDestroy");
  }

  cudaStream_t stream_;  // the backend's; the timer must not outlive its backend
  std::vector<cudaEvent_t> starts_, stops_;
  std::vector<bool> timed_;  // slot's last start has its stop
  std::vector<double> ms_;
};

}  // namespace

// Two pinned buffers: while the device copies one, the host fills (or drains) the other.
// Grown as copies need, up to kMaxChunk each; larger copies go in chunks.
struct CudaBackend::Staging {
  static constexpr size_t kMinChunk = size_t(1) << 20;
  static constexpr size_t kMaxChunk = size_t(16) << 20;

  std::mutex mutex;  // one copy at a time uses the buffers
  void* buffers[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};  // the device is through with buffers[i]
  size_t capacity = 0;                       // bytes of each buffer

  Staging() {
    for (cudaEvent_t& e : done)
      CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~Staging() {
    free_buffers();
    for (cudaEvent_t e : done)
      if (e) warn_on_error(cudaEventDestroy(e), "cudaEventDestroy");
  }
  // Buffers of at least min(bytes, kMaxChunk); returns the chunk size.
  size_t reserve(size_t bytes) {
    const size_t want = std::max(kMinChunk, std::bit_ceil(std::min(bytes, kMaxChunk)));
    if (capacity < want) {
      free_buffers();
      for (void*& b : buffers) CAMPO_CUDA_CHECK(cudaMallocHost(&b, want));
      capacity = want;
    }
    return capacity;
  }
  void free_buffers() noexcept {
    for (void*& b : buffers) {
      if (b) warn_on_error(cudaFreeHost(b), "cudaFreeHost");
      b = nullptr;
    }
    capacity = 0;
  }
};

// The prefetch's uploads (Backend::upload): a stream of their own, one pinned buffer per
// upload between two landings (a batch's images, its labels), reused a batch later once the
// copy from it is done, and two events ordering the streams: `uploaded` (the upload stream's
// copies so far) and `landed` (the compute stream has taken the staged tensors).
struct CudaBackend::Uploads {
  struct Block {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // the upload from this buffer is over
  };
  std::mutex mutex;
  cudaStream_t stream = nullptr;
  cudaEvent_t uploaded = nullptr, landed = nullptr;
  std::vector<Block> blocks;
  size_t next = 0;  // the block of the next upload since the last landing

  Uploads() {
    CAMPO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
    CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming));
  }
  ~Uploads() {
    if (stream) warn_on_error(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (Block& b : blocks) {
      if (b.host) warn_on_error(cudaFreeHost(b.host), "cudaFreeHost");
      if (b.done) warn_on_error(cudaEventDestroy(b.done), "cudaEventDestroy");
    }
    for (cudaEvent_t e : {uploaded, landed})
      if (e) warn_on_error(cudaEventDestroy(e), "cudaEventDestroy");
    if (stream) warn_on_error(cudaStreamDestroy(stream), "cudaStreamDestroy");
  }
  // A pinned buffer of at least `bytes` whose previous upload is over.
  Block& take(size_t bytes) {
    if (next == blocks.size()) {
      blocks.emplace_back();
      CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&blocks.back().done, cudaEventDisableTiming));
    }
    Block& b = blocks[next++];
    CAMPO_CUDA_CHECK(cudaEventSynchronize(b.done));  // an unrecorded event is complete
    if (b.bytes < bytes) {
      if (b.host) CAMPO_CUDA_CHECK(cudaFreeHost(b.host));
      b.host = nullptr;
      b.bytes = 0;
      CAMPO_CUDA_CHECK(cudaMallocHost(&b.host, bytes));
      b.bytes = bytes;
    }
    return b;
  }
};

// The per-step values' ring (queue_copy_from_host): kQueuedSlots pinned slots of
// kQueuedCopyMax bytes in one allocation, each with the event recorded behind the copy from
// it. A slot's copy reads it when the stream reaches it, so the slot stays untouched until
// its event has passed: the ring is kQueuedSlots copies deep before a write waits.
struct CudaBackend::QueuedCopies {
  std::mutex mutex;
  char* host = nullptr;  // kQueuedSlots * kQueuedCopyMax bytes, pinned
  cudaEvent_t done[kQueuedSlots] = {};
  bool issued[kQueuedSlots] = {};
  size_t next = 0;

  QueuedCopies() {
    try {
      CAMPO_CUDA_CHECK(cudaMallocHost(&host, kQueuedSlots * kQueuedCopyMax));
      for (cudaEvent_t& e : done)
        CAMPO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } catch (...) {
      release();
      throw;
    }
  }
  ~QueuedCopies() { release(); }
  void release() noexcept {
    for (cudaEvent_t& e : done) {
      if (e) warn_on_error(cudaEventDestroy(e), "cudaEventDestroy");
      e = nullptr;
    }
    if (host) warn_on_error(cudaFreeHost(host), "cudaFreeHost");
    host = nullptr;
  }
  // The next slot, once the copy issued from it kQueuedSlots copies ago has read it.
  char* take(size_t* slot) {
    *slot = next;
    next = (next + 1) % kQueuedSlots;
    if (issued[*slot]) CAMPO_CUDA_CHECK(cudaEventSynchronize(done[*slot]));
    return host + *slot * kQueuedCopyMax;
  }
};

CudaBackend::CudaBackend(int index) : index_(index) {
  try {
    CAMPO_CUDA_CHECK(cudaSetDevice(index_));
    cudaDeviceProp prop{};
    CAMPO_CUDA_CHECK(cudaGetDeviceProperties(&prop, index_));
    name_ = prop.name;
    total_memory_ = prop.totalGlobalMem;
    compute_capability_ = prop.major * 10 + prop.minor;
    multiprocessors_ = prop.multiProcessorCount;
    CAMPO_CUDA_CHECK(cudaDriverGetVersion(&driver_version_));
    char bus_id[32] = "";  // "0000:65:00.0" and its terminator fit in 13
    CAMPO_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, int(sizeof bus_id), index_));
    pci_bus_id_ = bus_id;

    CAMPO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CAMPO_CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
    CAMPO_CUDNN_CHECK(cudnnCreate(&cudnn_));
    CAMPO_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    staging_ = std::make_unique<Staging>();
    uploads_ = std::make_unique<Uploads>();
    queued_ = std::make_unique<QueuedCopies>();

    const int device = index_;
    allocator_ = std::make_unique<CachingAllocator>(
        [device](size_t bytes) -> void* {
          CAMPO_CUDA_CHECK(cudaSetDevice(device));
          void* p = nullptr;
          const cudaError_t status = cudaMalloc(&p, bytes);
          if (status == cudaErrorMemoryAllocation) {
            // Clear it, or the next kernel launch check (cudaGetLastError) would report it.
            cudaGetLastError();
            return nullptr;  // the allocator empties its cache, retries, then says how much
          }
          CAMPO_CUDA_CHECK(status);
          return p;
        },
        // cudaFree waits for the device, so memory is never freed under a queued kernel.
        [](void* p) { warn_on_error(cudaFree(p), "cudaFree"); },
        [device] {
          CAMPO_CUDA_CHECK(cudaSetDevice(device));
          CachingAllocator::MemoryInfo info;
          CAMPO_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
          return info;
        });
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() noexcept {
  if (stream_) {
    warn_on_error(cudaSetDevice(index_), "cudaSetDevice");  // the last owner may be any thread
    warn_on_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  // The cache goes now; blocks still owned by tensors are freed when their last owner dies.
  uploads_.reset();  // first: its stream may still copy into the allocator's blocks
  queued_.reset();   // after the stream's synchronization above: no copy reads a slot now
  allocator_.reset();
  staging_.reset();
  if (cudnn_) {
    const cudnnStatus_t status = cudnnDestroy(cudnn_);
    if (status != CUDNN_STATUS_SUCCESS)
      std::fprintf(stderr, "campo: warning: cudnnDestroy failed: %s\n",
                   cudnnGetErrorString(status));
    cudnn_ = nullptr;
  }
  if (cublaslt_) {
    const cublasStatus_t status = cublasLtDestroy(cublaslt_);
    if (status != CUBLAS_STATUS_SUCCESS)
      std::fprintf(stderr, "campo: warning: cublasLtDestroy failed: %s\n",
                   cublasLtGetStatusString(status));
    cublaslt_ = nullptr;
  }
  if (stream_) warn_on_error(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  stream_ = nullptr;
}

void CudaBackend::use_device() const { CAMPO_CUDA_CHECK(cudaSetDevice(index_)); }

std::string CudaBackend::describe() const {
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB", double(total_memory_) / double(1 << 30));
  return device().str() + ": " + name_ + ", compute capability " +
         std::to_string(compute_capability_ / 10) + "." + std::to_string(compute_capability_ % 10) +
         ", " + memory + ", " + std::to_string(multiprocessors_) + " SMs, driver " +
         version_str(driver_version_);
}

BackendIdentity CudaBackend::identity() const {
  // cuDNN 9 and cuBLASLt: major * 10000 + minor * 100 + patch.
  auto library_version = [](size_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
           std::to_string(v % 100);
  };
  BackendIdentity id;
  id.kind = campo::device_name(Device::cuda);
  id.fields = {
      {"gpu", name_},
      {"compute_capability",
       std::to_string(compute_capability_ / 10) + "." + std::to_string(compute_capability_ % 10)},
      {"multiprocessors", std::to_string(multiprocessors_)},
      {"driver", version_str(driver_version_), /*is_version=*/true},
      {"cuda_runtime", version_str(runtime_version()), true},
      {"cudnn", library_version(cudnn_version()), true},
      {"cublaslt", library_version(cublaslt_version()), true},
  };
  return id;
}

std::unique_ptr<NodeCounterReader> CudaBackend::make_counter_reader(size_t slots,
                                                                    std::string& why) {
  if (!counters_refused_.empty()) {
    why = counters_refused_;
    return nullptr;
  }
  use_device();
  std::unique_ptr<NodeCounterReader> reader = make_cupti_counter_reader(index_, slots, why);
  if (!reader) counters_refused_ = why;
  return reader;
}

std::optional<size_t> CudaBackend::available_memory() const {
  use_device();
  size_t free_bytes = 0, total_bytes = 0;
  CAMPO_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes + allocator_->stats().bytes_cached();  // the cache is ours to reuse
}

std::shared_ptr<void> CudaBackend::allocate(size_t bytes) {
  // Blocks in multiples of 512 bytes carved from cudaMalloc segments, 256-byte aligned.
  return allocator_->allocate(bytes);
}

void CudaBackend::copy_from_host(const Tensor& dst, const void* src) {
  check_device_tensor(dst, "copy_from_host");
  const size_t n = dst.nbytes();
  if (n == 0) return;
  use_device();
  std::lock_guard<std::mutex> lock(staging_->mutex);
  const size_t chunk = staging_->reserve(n);
  char* device = static_cast<char*>(dst.device_data());
  const char* host = static_cast<const char*>(src);
  for (size_t offset = 0, i = 0; offset < n; offset += chunk, ++i) {
    const size_t len = std::min(chunk, n - offset);
    const int b = int(i % 2);
    // The copy issued two chunks ago read this buffer; wait until it has.
    if (i >= 2) CAMPO_CUDA_CHECK(cudaEventSynchronize(staging_->done[b]));
    std::memcpy(staging_->buffers[b], host + offset, len);
    CAMPO_CUDA_CHECK(cudaMemcpyAsync(device + offset, staging_->buffers[b], len,
                                     cudaMemcpyHostToDevice, stream_));
    CAMPO_CUDA_CHECK(cudaEventRecord(staging_->done[b], stream_));
  }
  CAMPO_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::queue_copy_from_host(const Tensor& dst, const void* src) {
  check_device_tensor(dst, "queue_copy_from_host");
  const size_t n = dst.nbytes();
  CAMPO_CHECK(n <= kQueuedCopyMax, "internal: a queued copy of ", n, " bytes (at most ",
              kQueuedCopyMax, ")");
  if (n == 0) return;
  use_device();
  std::lock_guard<std::mutex> lock(queued_->mutex);
  size_t slot = 0;
  char* staged = queued_->take(&slot);
  std::memcpy(staged, src, n);
  CAMPO_CUDA_CHECK(cudaMemcpyAsync(dst.device_data(), staged, n, cudaMemcpyHostToDevice, stream_));
  CAMPO_CUDA_CHECK(cudaEventRecord(queued_->done[slot], stream_));
  queued_->issued[slot] = true;
}

void CudaBackend::copy_to_host(void* dst, const Tensor& src) {
  check_device_tensor(src, "copy_to_host");
  const size_t n = src.nbytes();
  if (n == 0) return;
  use_device();
  std::lock_guard<std::mutex> lock(staging_->mutex);
  const size_t chunk = staging_->reserve(n);
  const char* device = static_cast<const char*>(src.device_data());
  char* host = static_cast<char*>(dst);
  // Chunk i is copied into buffer i % 2 while the host drains chunk i - 1 from the other.
  auto drain = [&](size_t i) {
    const size_t offset = i * chunk, len = std::min(chunk, n - offset);
    const int b = int(i % 2);
    CAMPO_CUDA_CHECK(cudaEventSynchronize(staging_->done[b]));
    std::memcpy(host + offset, staging_->buffers[b], len);
  };
  const size_t chunks = (n + chunk - 1) / chunk;
  for (size_t i = 0; i < chunks; ++i) {
    const size_t offset = i * chunk, len = std::min(chunk, n - offset);
    const int b = int(i % 2);
    CAMPO_CUDA_CHECK(cudaMemcpyAsync(staging_->buffers[b], device + offset, len,
                                     cudaMemcpyDeviceToHost, stream_));
    CAMPO_CUDA_CHECK(cudaEventRecord(staging_->done[b], stream_));
    if (i > 0) drain(i - 1);
  }
  // The last chunk's event follows everything issued before it on the stream.
  drain(chunks - 1);
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  check_device_tensor(dst, "copy");
  check_device_tensor(src, "copy");
  CAMPO_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(),
              "copy: ", dtype_name(src.dtype()), shape_str(src.shape()), " into ",
              dtype_name(dst.dtype()), shape_str(dst.shape()));
  if (dst.nbytes() == 0 || dst.device_data() == src.device_data()) return;
  use_device();
  CAMPO_CUDA_CHECK(cudaMemcpyAsync(dst.device_data(), src.device_data(), dst.nbytes(),
                                   cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill_zero(const Tensor& t) {
  check_device_tensor(t, "fill_zero");
  if (t.nbytes() == 0) return;
  use_device();
  CAMPO_CUDA_CHECK(cudaMemsetAsync(t.device_data(), 0, t.nbytes(), stream_));
}

void CudaBackend::upload(const Tensor& staged, const void* src) {
  check_device_tensor(staged, "upload");
  const size_t n = staged.nbytes();
  if (n == 0) return;
  use_device();
  std::lock_guard<std::mutex> lock(uploads_->mutex);
  Uploads::Block& b = uploads_->take(n);
  std::memcpy(b.host, src, n);
  // The compute stream has copied the staged tensor's previous contents out.
  CAMPO_CUDA_CHECK(cudaStreamWaitEvent(uploads_->stream, uploads_->landed, 0));
  CAMPO_CUDA_CHECK(
      cudaMemcpyAsync(staged.device_data(), b.host, n, cudaMemcpyHostToDevice, uploads_->stream));
  CAMPO_CUDA_CHECK(cudaEventRecord(b.done, uploads_->stream));
  CAMPO_CUDA_CHECK(cudaEventRecord(uploads_->uploaded, uploads_->stream));
}

void CudaBackend::land_uploads(const std::vector<UploadCopy>& copies) {
  use_device();
  std::lock_guard<std::mutex> lock(uploads_->mutex);
  CAMPO_CUDA_CHECK(cudaStreamWaitEvent(stream_, uploads_->uploaded, 0));
  for (const auto& [dst, staged] : copies) {
    check_device_tensor(*dst, "land_uploads");
    check_device_tensor(*staged, "land_uploads");
    CAMPO_CHECK(dst->nbytes() == staged->nbytes(), "internal: landing an upload of ",
                staged->nbytes(), " bytes in a tensor of ", dst->nbytes());
    CAMPO_CUDA_CHECK(cudaMemcpyAsync(dst->device_data(), staged->device_data(), dst->nbytes(),
                                     cudaMemcpyDeviceToDevice, stream_));
  }
  CAMPO_CUDA_CHECK(cudaEventRecord(uploads_->landed, stream_));
  uploads_->next = 0;
}

void CudaBackend::synchronize() {
  CAMPO_CUDA_CHECK(cudaStreamSynchronize(stream_));
  CAMPO_CUDA_CHECK(cudaStreamSynchronize(uploads_->stream));
}

namespace {

// An instantiated CUDA graph, launched on the backend's stream.
class CudaGraphWork final : public CapturedWork {
 public:
  CudaGraphWork(cudaGraph_t graph, cudaStream_t stream) : graph_(graph), stream_(stream) {
    const cudaError_t status = cudaGraphInstantiate(&exec_, graph_, 0);
    if (status != cudaSuccess) {
      cudaGraphDestroy(graph_);
      CAMPO_CUDA_CHECK(status);
    }
  }
  ~CudaGraphWork() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  void replay() override { CAMPO_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::string CudaBackend::capture_unsupported() const { return {}; }

void CudaBackend::begin_capture() {
  use_device();
  // Thread-local: a call of this thread that could synchronize (cudaMalloc, a synchronous
  // copy, an event query) fails the capture instead of waiting on work that is not issued.
  CAMPO_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

std::unique_ptr<CapturedWork> CudaBackend::end_capture() {
  cudaGraph_t graph = nullptr;
  CAMPO_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  return std::make_unique<CudaGraphWork>(graph, stream_);
}

void CudaBackend::abort_capture() noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();  // the capture's error, so the next launch check does not see it
}

std::unique_ptr<NodeTimer> CudaBackend::make_timer(size_t slots) {
  use_device();  // events belong to the current device, and must be the stream's
  std::string why_not;
  if (auto timer = make_cupti_timer(stream_, slots, describe(), why_not)) {
    node_timer_source_ = "CUPTI kernel activity";
    return timer;
  }
  node_timer_source_ = "CUDA events (CUPTI unavailable: " + why_not + ")";
  return std::make_unique<CudaNodeTimer>(stream_, slots);
}

std::string CudaBackend::node_timer_source() const {
  return node_timer_source_.empty() ? "no node timed yet" : node_timer_source_;
}

}  // namespace cuda

namespace {

// Checks what is missing in the order a user fixes it: the driver, a device at all, the index
// asked for, a GPU new enough for this CUDA, code in this build for its architecture.
std::shared_ptr<Backend> make_cuda_backend(const DeviceSpec& spec) {
  const int driver = cuda::driver_version(), runtime = cuda::runtime_version();
  // A driver of the same major version runs any minor release of the runtime (CUDA's minor
  // version compatibility). No driver at all reads as no device, below.
  CAMPO_CHECK(driver == 0 || driver / 1000 >= runtime / 1000, "--device ", spec.str(),
              ": the NVIDIA driver supports CUDA up to ", cuda::version_str(driver),
              " but this build of campo uses CUDA ", cuda::version_str(runtime),
              "; install a driver for CUDA ", runtime / 1000, " or newer, or use --device cpu");
  const int devices = cuda::device_count();
  CAMPO_CHECK(devices > 0, "--device ", spec.str(),
              ": no CUDA device is present (cuda::device_count() is 0: no GPU, or no driver "
              "for it); use --device cpu");
  CAMPO_CHECK(spec.index < devices, "--device ", spec.str(), ": this machine has ", devices,
              " CUDA device", devices == 1 ? "" : "s", " (cuda:0",
              devices == 1 ? "" : " .. cuda:" + std::to_string(devices - 1), ")");
  int major = 0, minor = 0;
  CAMPO_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, spec.index));
  CAMPO_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, spec.index));
  const std::string name = cuda::device_name(spec.index);
  CAMPO_CHECK(major * 10 + minor >= 75, "--device ", spec.str(), ": ", name,
              " has compute capability ", major, ".", minor, "; CUDA ", runtime / 1000,
              " (this build's) supports 7.5 (Turing) or newer only; use --device cpu");
  CAMPO_CHECK(cuda::runs_this_build(spec.index), "--device ", spec.str(),
              ": this build has GPU code for ", cuda::built_architectures(), " only, which ", name,
              " (compute capability ", major, ".", minor,
              ") cannot run; rebuild with -DCMAKE_CUDA_ARCHITECTURES=", major, minor);
  return std::make_shared<cuda::CudaBackend>(spec.index);
}

const bool cuda_registered = (register_backend(Device::cuda, make_cuda_backend), true);

}  // namespace
}  // namespace campo
