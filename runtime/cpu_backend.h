// The CPU backend: 64-byte aligned host memory, memcpy copies, oneDNN's CPU engine and an
// in-order stream (kernels run synchronously, so synchronize has nothing to wait for), a
// host wall clock per node, and the CPU's kernel lookup rule: f16/bf16 ops without a
// native kernel run their f32 kernel emulated (ops/cpu/low_precision.h).
#pragma once

#include <atomic>
#include <memory>

#include "runtime/backend.h"
#include "runtime/timer.h"

namespace dnnl {
struct engine;
struct stream;
}  // namespace dnnl

namespace campo {

class CpuBackend : public Backend {
 public:
  // Reads CAMPO_CPU_BF16 (unset or `native`: native bf16 kernels where the CPU has them;
  // `emulate`: every bf16 kernel runs as f32 emulation) and CAMPO_CPU_F16 (the same for
  // f16); throws on any other value.
  CpuBackend();
  ~CpuBackend() override;

  DeviceSpec device() const override { return {Device::cpu, 0}; }
  Device kernel_device() const override { return Device::cpu; }
  std::string describe() const override;
  // kind "cpu"; cpu_model (/proc/cpuinfo "model name"), logical_cores
  // (hardware_concurrency), onednn_isa (the effective ISA, onednn_isa_name), onednn_version
  // (a version), native_bf16 ("true" where cpu_has_native_bf16 and CAMPO_CPU_BF16 allows
  // native kernels), native_f16 (the same for f16, CAMPO_CPU_F16). The fields and their values are
  // those calibration files have always recorded in their `machine` object, so files written before
  // BackendIdentity still match.
  BackendIdentity identity() const override;
  // No per-node counters (only the CUDA backend reads them); says so with what
  // perf_event_open of the instructions counter finds: "the cpu backend reads no hardware
  // counters per node (perf_event_open(instructions): <works | its error>, perf_event_paranoid N)".
  std::string counters_unavailable() const override;
  bool emulates_low_precision() const override { return true; }
  // oneDNN's AVX-512 kernels, the only ones that run bf16 natively here, work on blocks of
  // 16 channels (nChw16c activations, 16-wide output blocks of the filters) and their bf16
  // GEMMs on 16-element panels; AMX tiles are 16 rows of 32 bf16. Below AVX-512 BF16 the
  // bf16 kernels are emulated in f32 and ignore padding.
  int padding_alignment() const override { return 16; }

  std::shared_ptr<void> allocate(size_t bytes) override;
  std::optional<size_t> available_memory() const override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill_zero(const Tensor& t) override;
  void synchronize() override {}
  std::unique_ptr<NodeTimer> make_timer(size_t slots) override;
  std::string node_timer_source() const override { return "host clock"; }

  dnnl::engine& engine();
  dnnl::stream& stream();
  // CAMPO_CPU_BF16 as read at construction: whether bf16 kernels may be native.
  bool allows_native_low_precision() const override { return native_bf16_allowed_; }
  // CAMPO_CPU_F16 as read at construction: whether f16 kernels may be native.
  bool allows_native_f16() const override { return native_f16_allowed_; }
  // Buffers allocated so far (arena, variables, inputs): how a run proves which backend
  // served it (--device cpu:strict reports the default CPU backend's count, 0).
  int64_t allocation_count() const { return allocations_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool native_bf16_allowed_ = true;
  bool native_f16_allowed_ = true;
  std::atomic<int64_t> allocations_{0};
};

// The CPU's model name ("AMD EPYC"; "unknown" where /proc/cpuinfo has none).
std::string cpu_model_name();
// oneDNN's effective CPU ISA by name ("avx512_core_bf16"; "other" for one not named here).
std::string onednn_isa_name();
// "3.1.1": the oneDNN library loaded.
std::string onednn_version();
// Whether this CPU has AVX-512 BF16 and oneDNN's effective ISA includes it
// (avx512_core_bf16 or above; ONEDNN_MAX_CPU_ISA can lower it).
bool cpu_has_native_bf16();
// Whether this CPU has AVX-512 FP16 and oneDNN's effective ISA includes it
// (avx512_core_fp16 or above: Sapphire Rapids and later Xeons; ONEDNN_MAX_CPU_ISA can lower
// it): where oneDNN's f16 convolutions and GEMMs are native. Elsewhere oneDNN 3.2 has no f16
// convolution at all and campo emulates f16 in f32.
bool cpu_has_native_f16();

// A host timer per node: each slot's wall time between start and stop.
class HostNodeTimer : public NodeTimer {
 public:
  explicit HostNodeTimer(size_t slots) : ms_(slots, 0.0) {}
  void start(size_t slot) override;
  void stop(size_t slot) override;
  const std::vector<double>& elapsed_ms() override { return ms_; }

 private:
  std::vector<double> ms_;
  Timer timer_;
};

}  // namespace campo
