// The energy counter that measures a backend's device (open_device_energy): the CPU's RAPL
// counters (runtime/energy.h) for the CPU's kernels, a GPU's NVML counter
// (runtime/nvml_energy.h) for CUDA. Above both meters: the one place that picks between them.
#pragma once

#include <memory>
#include <string>

#include "runtime/energy.h"

namespace campo {

class Backend;

// The counter that measures `backend`'s device, opened: RAPL under `powercap_root` for the
// CPU's kernels (cpu, cpu:strict); for a GPU, NVML loaded from `nvml_library`
// (nvml_library_path()) and matched to the backend's GPU by its PCI bus id (a PciDevice,
// runtime/pci_device.h). No meter: the one line why in `unavailable`.
struct DeviceEnergy {
  std::unique_ptr<EnergyMeter> meter;
  std::string unavailable;
};
DeviceEnergy open_device_energy(const Backend& backend, const std::string& powercap_root,
                                const std::string& nvml_library);

}  // namespace campo
