// A Backend is the one place where a device is known: it allocates the buffers of tensors
// on its device (the executor's arena, placeholders, variables, weight copies, kernel
// workspace), copies between host and device, owns the queue kernels run on and
// synchronizes it, times nodes, and describes the machine. Everything above runtime/
// reaches a device only through one (ggml's backend interface and PyTorch's device
// abstraction are the models).
//
// Host boundaries are explicit: a tensor of a device other than the CPU refuses host access
// (Tensor::data_as), so feeding inputs, reading a loss, saving a checkpoint go through
// to_host / to_device / write / read_scalar here. Kernels reach their device's memory with
// Tensor::device_data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/conv_algo_cache.h"
#include "runtime/device.h"
#include "runtime/hardware_counters.h"
#include "runtime/tensor.h"

namespace campo {

// Which device, as the user names it: "cpu", "cuda", "cuda:N".
struct DeviceSpec {
  Device type = Device::cpu;
  int index = 0;
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const DeviceSpec&) const = default;
};
// Parses --device; one error line naming the value and what is accepted otherwise.
DeviceSpec parse_device_spec(std::string_view s);

// What makes timings measured on one machine valid on another: the key of a calibration
// file (amp/calibration.h), which stores and compares it without knowing any device. `kind`
// is the device kind (device_name of DeviceSpec::type: "cpu", "cpu:strict", "cuda"); the
// fields, in a stable order, say what hardware and software the kernels ran on. A field
// that differs means another machine, except a library version (`is_version`): the same
// machine with other software, whose timings are stale rather than foreign.
struct BackendIdentity {
  struct Field {
    std::string name;  // "cpu_model", "gpu", "cudnn_version", ...
    std::string value;
    bool is_version = false;
    // What sets it, where the user can change it without changing machine
    // ("CAMPO_CPU_BF16"); said in the message when it differs.
    std::string set_by;
    // For a field added after files were written: the value a file without it was made
    // with ("false" for native_f16: campo had no native f16 before it recorded the field).
    // Such a file matches a machine whose value is this one. Empty: absent never matches.
    std::string absent_means;
  };
  std::string kind;
  std::vector<Field> fields;

  // The field called `name`; null when there is none.
  const Field* find(std::string_view name) const;
  // A short stable hash (16 hex digits) of the kind and the fields that are not versions:
  // the same for every machine a calibration is valid on, whatever its library versions.
  std::string hardware_hash() const;
};

// Times the kernels of one step on a backend's queue: start(slot) / stop(slot) around each
// node as it is issued; elapsed_ms() (after the step, synchronizing first) gives each slot's
// time of its last start/stop pair. On the CPU a host clock; on CUDA the GPU time of the
// node's kernels from CUPTI (runtime/kernel_activity.h), or events around it.
class NodeTimer : public NodeBrackets {
 public:
  virtual const std::vector<double>& elapsed_ms() = 0;
};

// A step's device work recorded once and issued again whole (a CUDA graph): what the
// executor replays instead of launching a static step's kernels one by one
// (Backend::begin_capture).
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Issues the recorded work on the backend's queue again (asynchronously, as a launch).
  virtual void replay() = 0;
};

// --cuda-graph: whether executables on a backend capture their step once and replay it.
// automatic: where the backend can record its queue and every kernel of the step allows it
// (else launched kernel by kernel, the reason kept: Executable::replay_status); on: the
// same, but where it cannot, one error line; off: launched kernel by kernel.
enum class CudaGraphMode : uint8_t { automatic, on, off };
const char* cuda_graph_mode_name(CudaGraphMode mode);  // "auto", "on", "off"
// "auto" | "on" | "off"; one error line naming the value otherwise.
CudaGraphMode parse_cuda_graph_mode(std::string_view s);

class Backend {
 public:
  virtual ~Backend() = default;

  // The device its tensors are tagged with.
  virtual DeviceSpec device() const = 0;
  // Whose kernels run on it: the device of the kernel registry's (op, device, dtype) keys.
  virtual Device kernel_device() const = 0;
  // One line saying what the machine is (CPU model and ISA; GPU name, compute capability
  // and memory), for --version, calibration files and bench JSON.
  virtual std::string describe() const = 0;
  // The machine as a calibration is keyed by (BackendIdentity above).
  virtual BackendIdentity identity() const = 0;
  // The kernel lookup rule of this device: an op without a low-precision (f16/bf16) kernel
  // but with an f32 one runs that f32 kernel emulated (convert in, compute in f32, round
  // out). The CPU's rule (ops/cpu/low_precision.h); a GPU backend says false, so a missing
  // kernel is an error.
  virtual bool emulates_low_precision() const { return false; }
  // Whether low-precision kernels may use native implementations (the CPU: unless
  // CAMPO_CPU_BF16=emulate); ExecContext::native_bf16 starts from it.
  virtual bool allows_native_low_precision() const { return true; }
  // The same for f16 (the CPU: unless CAMPO_CPU_F16=emulate); ExecContext::native_f16.
  virtual bool allows_native_f16() const { return true; }
  // The multiple that the padding of low-precision GEMM dimensions and convolution channels
  // (amp/padding.h) rounds unaligned sizes up to: the block this device's fast
  // low-precision kernels work on.
  virtual int padding_alignment() const = 0;

  // `bytes` of device memory, 64-byte aligned, freed with the last owner.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  // What allocate() can still give (the host's available memory on the CPU; free plus
  // cached device memory on a GPU); unset where unknown. The executor checks its memory plan
  // against it before allocating.
  virtual std::optional<size_t> available_memory() const = 0;
  // Copies of dst.nbytes() / src.nbytes() bytes; when they return the data is in place.
  // copy_from_host and copy_to_host wait for the device (a GPU's stream is drained): the
  // host synchronizations of a step are these, synchronize() and a timer's elapsed_ms().
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;  // device to device
  virtual void fill_zero(const Tensor& t) = 0;
  // A per-step value (a learning rate, the step number, the loss scale: at most
  // kQueuedCopyMax bytes) copied into `dst` in queue order: after the work issued before,
  // before the work issued after, without waiting for the device. `src` may be reused when
  // it returns (the backend stages it: CUDA in a ring of pinned slots, each reused once the
  // copy from it is done). The default is copy_from_host: a device whose copies are host
  // work has no queue to wait for.
  static constexpr size_t kQueuedCopyMax = 256;
  virtual void queue_copy_from_host(const Tensor& dst, const void* src);
  // Waits for everything issued on its queue.
  virtual void synchronize() = 0;
  virtual std::unique_ptr<NodeTimer> make_timer(size_t slots) = 0;
  // What make_timer's timers measure, as `campo train --profile` reports it: "host clock" on
  // the CPU; on CUDA "CUPTI kernel activity", or "CUDA events (CUPTI unavailable: <why>)".
  virtual std::string node_timer_source() const = 0;
  // Hardware counters of nodes (runtime/hardware_counters.h) for a step of `slots` nodes;
  // null where this device cannot read them, with `why` set to one phrase saying why.
  // counters_unavailable() says so before any step is compiled for it: empty where a reader
  // may be made (CUDA, until the driver refused one), else why not. The defaults: "the
  // <device> backend reads no hardware counters".
  virtual std::string counters_unavailable() const;
  // The most nodes one reader brackets; a larger step is read a window of nodes at a time
  // (train/profiling.h). Default: no limit.
  virtual size_t counter_slots_at_once() const { return SIZE_MAX; }
  virtual std::unique_ptr<NodeCounterReader> make_counter_reader(size_t slots, std::string& why);

  // ---- input prefetch: the next batch's copy overlapping the step ----
  // Whether this device copies host data on a queue beside its compute queue (a GPU's copy
  // engine), so that the training loop reads the next batch during a step and uploads it
  // then (train/loop.cc). The CPU: no (a copy is host work like the step's). cpu:strict: yes,
  // so the path a GPU takes runs, counted, without one.
  virtual bool overlaps_uploads() const { return false; }
  // Starts copying staged.nbytes() bytes of host memory `src` into `staged`, a tensor of
  // this device, on the upload queue, ordered after the compute queue has taken the uploads
  // issued before (land_uploads); `src` may be reused when it returns. Default: a plain copy.
  virtual void upload(const Tensor& staged, const void* src);
  // The compute queue waits for every upload issued so far, then copies each pair's staged
  // tensor (.second) into its destination (.first, the same byte count); the staged tensors
  // may be uploaded to again from then on. Default: plain copies.
  using UploadCopy = std::pair<const Tensor*, const Tensor*>;
  virtual void land_uploads(const std::vector<UploadCopy>& copies);

  // ---- recording a step for replay (CUDA graphs) ----
  // Empty when this backend can record the work issued on its queue (begin_capture); else
  // why not, as a phrase ("the cpu backend runs each kernel on the host as it is issued").
  virtual std::string capture_unsupported() const;
  // From begin_capture to end_capture, work issued on the queue is recorded, not run (and
  // nothing else may be issued, copied or synchronized); end_capture returns it, ready to
  // replay. abort_capture ends a capture that failed halfway (a kernel threw), leaving the
  // queue usable; nothing when none is under way. The defaults refuse (internal error).
  virtual void begin_capture();
  virtual std::unique_ptr<CapturedWork> end_capture();
  virtual void abort_capture() noexcept {}
  // --cuda-graph for this run's executables (CudaGraphMode above); `on` where
  // capture_unsupported() says why not is one error line.
  void set_cuda_graph(CudaGraphMode mode);
  CudaGraphMode cuda_graph() const { return cuda_graph_; }

  // ---- --deterministic ----
  // Whether kernels must give the same bits on every run of the same step: CUDA's cuDNN
  // convolutions then take only algorithms cuDNN reports deterministic (no atomics:
  // ops/cuda/conv_algo_filter.h). The CPU's kernels (oneDNN, own loops) already are, for a
  // given machine and thread count, so there it is recorded and changes nothing. Set before
  // the first executable is compiled on this backend (kernels choose algorithms then).
  void set_deterministic(bool on) { deterministic_ = on; }
  bool deterministic() const { return deterministic_; }
  // The cuDNN convolution algorithm cache of a GPU backend (runtime/conv_algo_cache.h: the
  // searches run, their time, the lookups answered); null on a device without one.
  virtual const ConvAlgoCache* conv_algo_cache() const { return nullptr; }

  // ---- built on the above ----
  Tensor empty(const Shape& shape, DType dtype);
  Tensor zeros(const Shape& shape, DType dtype);
  // A new tensor of this device holding `host`'s values (a host tensor).
  Tensor to_device(const Tensor& host);
  // A new host tensor holding `t`'s values (a tensor of this device).
  Tensor to_host(const Tensor& t);
  // Copies the host tensor `host` (same dtype and element count) into `dst`.
  void write(const Tensor& dst, const Tensor& host);
  // The value of an f32 tensor of one element of this device.
  float read_scalar(const Tensor& t);
  // f32 element 0, in queue order (queue_copy_from_host): a per-step scalar drains no queue.
  void write_scalar(const Tensor& dst, float value);

 protected:
  // Tags storage of this backend as a tensor of its device.
  Tensor wrap(std::shared_ptr<void> storage, const Shape& shape, DType dtype) const;

 private:
  CudaGraphMode cuda_graph_ = CudaGraphMode::automatic;
  bool deterministic_ = false;
};

// Backends by device type. Each device's backend registers a factory at start-up (the CPU
// always; CUDA where the build has it), so no code outside that registration tests the
// build for CUDA.
using BackendFactory = std::shared_ptr<Backend> (*)(const DeviceSpec& spec);
void register_backend(Device type, BackendFactory factory);
// A new backend for `spec`; one error line when the build or the machine has no such
// device ("--device cuda: this build has no CUDA backend ...").
std::shared_ptr<Backend> make_backend(const DeviceSpec& spec);
// The process's default CPU backend (shared by everything that names no backend).
std::shared_ptr<Backend> default_cpu_backend();
// `backend` itself; an internal error when it is null: sessions and variable stores are
// given their run's backend and never fall back to the CPU.
std::shared_ptr<Backend> required_backend(std::shared_ptr<Backend> backend);

}  // namespace campo
