// A test-only second backend: host memory and the CPU's kernels, but its tensors are
// tagged Device::test, so host code that reads or writes them directly (Tensor::data,
// data_as, to_float_vector, copy_from, ...) throws, as it would for GPU memory. Whatever
// trains on it bit-identically to the CPU backend therefore crosses every host boundary
// through the backend's copies, which it counts.
#pragma once

#include "runtime/cpu_backend.h"

namespace campo::testing {

class StagingBackend : public CpuBackend {
 public:
  DeviceSpec device() const override { return {Device::test, 0}; }
  std::string describe() const override { return "test: staging over " + CpuBackend::describe(); }
  void copy_from_host(const Tensor& dst, const void* src) override {
    ++to_device_copies;
    CpuBackend::copy_from_host(dst, src);
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    ++to_host_copies;
    CpuBackend::copy_to_host(dst, src);
  }
  int64_t to_device_copies = 0, to_host_copies = 0;
};

}  // namespace campo::testing
