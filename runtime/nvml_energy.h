// Energy of one NVIDIA GPU from NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption:
// millijoules since the driver was loaded, on Volta and later GPUs), the counter campo bench
// reads around each policy's timed steps on --device cuda.
//
// NVML ships with the driver, not the toolkit, so it is loaded at run time (dlopen): a build
// has no link-time dependency on it and no nvml.h; the few entry points used are declared
// here from NVIDIA's documented signatures. A machine without the driver's library, an NVML
// that does not start, a GPU without the counter, or a user NVML refuses it, leaves the
// run without energy figures, with one line saying which (NvmlEnergy::open).
//
// Invariants: the GPU is the one the run's CUDA device is, matched by PCI bus id (CUDA's
// device order and CUDA_VISIBLE_DEVICES renumber devices; NVML's indices do not follow them).
// The counter counts the whole board: every process on that GPU, not only this one (on a
// MIG-partitioned GPU, every instance). It is refreshed every 20-100 ms, so a window shorter
// than update_period_seconds() is not a reliable measurement. Each open NvmlEnergy holds one
// nvmlInit_v2 (NVML counts them) and one dlopen reference, released by its destructor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/energy.h"

namespace campo {

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";
inline constexpr const char* kNvmlLibraryVariable = "CAMPO_NVML_LIBRARY";

// The library NVML is loaded from: $CAMPO_NVML_LIBRARY when it is set and not empty (tests'
// fake NVML, or a driver installed where the loader does not look), else kNvmlLibrary.
std::string nvml_library_path();

class NvmlEnergy final : public EnergyMeter {
 public:
  // NVML from `library`, initialized, and the GPU whose PCI bus id is `pci_bus_id`
  // (domain:bus:device.function in hex, as cudaDeviceGetPCIBusId writes it), its counter read
  // once. Null, and `*unavailable` set to one line saying why, when any step fails.
  static std::unique_ptr<NvmlEnergy> open(const std::string& library, const std::string& pci_bus_id,
                                          std::string* unavailable);
  ~NvmlEnergy() override;
  NvmlEnergy(const NvmlEnergy&) = delete;
  NvmlEnergy& operator=(const NvmlEnergy&) = delete;

  const char* source() const override { return "nvml"; }
  // The counter is refreshed every 20 to 100 ms, depending on the GPU: the larger bound.
  double update_period_seconds() const override { return 0.1; }
  // One value: the counter, in millijoules. Throws, with NVML's reason, if it cannot be read
  // any more.
  std::vector<uint64_t> read() const override;
  // (after - before) / 1000. The counter does not wrap (64 bits of millijoules); a smaller
  // `after` means the driver was reloaded in between, an error.
  double joules_between(const std::vector<uint64_t>& before,
                        const std::vector<uint64_t>& after) const override;
  const std::string& pci_bus_id() const { return pci_bus_id_; }

 private:
  struct Api;  // the library handle and its entry points
  NvmlEnergy(std::unique_ptr<Api> api, void* device, std::string pci_bus_id);
  std::unique_ptr<Api> api_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::string pci_bus_id_;
};

}  // namespace campo
