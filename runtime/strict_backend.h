// --device cpu:strict: the CPU's kernels over host memory whose tensors are tagged
// Device::cpu_strict, so host code that reads or writes them directly (Tensor::data,
// data_as, to_float_vector, copy_from, ...) throws, as it would for GPU memory. A debugging
// device for backend authors: whatever runs on it bit-identically to --device cpu crosses
// every host boundary through the backend's copies, which it counts, and allocates nothing
// from the default CPU backend (CpuBackend::allocation_count).
#pragma once

#include <atomic>

#include "runtime/check.h"
#include "runtime/cpu_backend.h"

namespace campo {

class StrictCpuBackend : public CpuBackend {
 public:
  DeviceSpec device() const override { return {Device::cpu_strict, 0}; }
  std::string describe() const override { return "cpu:strict over " + CpuBackend::describe(); }
  // The CPU's fields under its own kind, "cpu:strict" (CpuBackend::identity names the kind
  // by device()): its timings include the counting of copies, so a calibration made on it
  // is its own and a CPU's is not used for it.
  //
  // It also counts the host synchronizations a GPU backend would make (host_syncs): the calls
  // that wait for a GPU's queue (Backend: copy_from_host, copy_to_host, synchronize), not
  // those that a GPU issues in queue order (queue_copy_from_host, upload, land_uploads), so
  // that a test proves on any machine which waits a training step makes.
  void copy_from_host(const Tensor& dst, const void* src) override {
    ++to_device_copies;
    ++host_syncs;
    CpuBackend::copy_from_host(dst, src);
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    ++to_host_copies;
    ++host_syncs;
    CpuBackend::copy_to_host(dst, src);
  }
  void synchronize() override { ++host_syncs; }
  void queue_copy_from_host(const Tensor& dst, const void* src) override {
    CAMPO_CHECK(dst.nbytes() <= kQueuedCopyMax, "internal: a queued copy of ", dst.nbytes(),
                " bytes (at most ", kQueuedCopyMax, ")");
    ++to_device_copies;
    ++queued_copies;
    CpuBackend::copy_from_host(dst, src);  // a host copy, not a wait
  }
  // A GPU's path through the training loop's prefetch (the uploads are host copies here).
  bool overlaps_uploads() const override { return true; }
  void upload(const Tensor& staged, const void* src) override {
    ++uploads;
    ++to_device_copies;
    CpuBackend::copy_from_host(staged, src);  // on a GPU's upload stream: not a wait
  }
  // uploads: the prefetch's; queued_copies: queue_copy_from_host's (both also counted in
  // to_device_copies); host_syncs: the waits above.
  int64_t to_device_copies = 0, to_host_copies = 0, uploads = 0, queued_copies = 0, host_syncs = 0;
};

}  // namespace campo
