#include "runtime/device_energy.h"

#include <utility>

#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/nvml_energy.h"
#include "runtime/pci_device.h"

namespace campo {

DeviceEnergy open_device_energy(const Backend& backend, const std::string& powercap_root,
                                const std::string& nvml_library) {
  DeviceEnergy energy;
  switch (backend.kernel_device()) {
    case Device::cpu:
    case Device::cpu_strict:
      if (auto rapl = RaplEnergy::open(powercap_root))
        energy.meter = std::make_unique<RaplEnergy>(std::move(*rapl));
      else
        energy.unavailable = rapl_unavailable_reason(powercap_root);
      return energy;
    case Device::cuda: {
      const auto* gpu = dynamic_cast<const PciDevice*>(&backend);
      CAMPO_CHECK(gpu != nullptr, "internal: the ", backend.device().str(),
                  " backend names no PCI bus id to find its GPU in NVML");
      energy.meter = NvmlEnergy::open(nvml_library, gpu->pci_bus_id(), &energy.unavailable);
      return energy;
    }
  }
  CAMPO_CHECK(false, "internal: no energy counter for device ",
              device_name(backend.kernel_device()));
  return energy;
}

}  // namespace campo
