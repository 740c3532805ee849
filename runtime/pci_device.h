// A backend whose device sits on the PCI bus (the CUDA backend). Tools outside the device's
// own API name the device by its PCI bus id (NVML: runtime/nvml_energy.h), never by the
// device's index, which CUDA_VISIBLE_DEVICES and CUDA's device order renumber. Code that sees
// only a Backend reaches it with a dynamic_cast, without the device's headers (as
// CachingAllocatorOwner does for the allocator).
#pragma once

#include <string>

namespace campo {

class PciDevice {
 public:
  // domain:bus:device.function in hex, "0000:65:00.0" (cudaDeviceGetPCIBusId's form).
  virtual std::string pci_bus_id() const = 0;

 protected:
  ~PciDevice() = default;
};

}  // namespace campo
