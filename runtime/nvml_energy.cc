#include "runtime/nvml_energy.h"

#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

#include "runtime/check.h"

namespace campo {
namespace {

// NVML's types and the entry points used, as nvml.h declares them: nvmlReturn_t is an enum
// (an int in the C ABI), nvmlDevice_t an opaque pointer.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED
constexpr NvmlReturn kNvmlNoPermission = 4;  // NVML_ERROR_NO_PERMISSION

using InitFn = NvmlReturn (*)();                                        // nvmlInit_v2
using ShutdownFn = NvmlReturn (*)();                                    // nvmlShutdown
using ErrorStringFn = const char* (*)(NvmlReturn);                      // nvmlErrorString
using HandleByPciBusIdFn = NvmlReturn (*)(const char*, NvmlDevice*);    // ..._v2
using TotalEnergyFn = NvmlReturn (*)(NvmlDevice, unsigned long long*);  // mJ

}  // namespace

struct NvmlEnergy::Api {
  void* library = nullptr;  // dlopen handle
  bool initialized = false;
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  HandleByPciBusIdFn handle_by_pci_bus_id = nullptr;
  TotalEnergyFn total_energy = nullptr;

  ~Api() {
    if (initialized) shutdown();  // a failure here has nobody to tell: the reading is done
    if (library) dlclose(library);
  }

  // "Not Supported (NVML error 3)": NVML's own words and the code.
  std::string describe(NvmlReturn status) const {
    const char* text = error_string ? error_string(status) : nullptr;
    return std::string(text ? text : "unknown error") + " (NVML error " + std::to_string(status) +
           ")";
  }
};

std::string nvml_library_path() {
  const char* named = std::getenv(kNvmlLibraryVariable);
  return named && *named ? named : kNvmlLibrary;
}

std::unique_ptr<NvmlEnergy> NvmlEnergy::open(const std::string& library,
                                             const std::string& pci_bus_id,
                                             std::string* unavailable) {
  CAMPO_CHECK(unavailable != nullptr, "internal: NvmlEnergy::open without a place for its reason");
  auto api = std::make_unique<Api>();
  dlerror();  // clear a stale message
  api->library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->library) {
    const char* why = dlerror();
    *unavailable = "cannot load NVML, the NVIDIA driver's library (" +
                   std::string(why ? why : library) + "; " + kNvmlLibraryVariable +
                   " names another path)";
    return nullptr;
  }
  auto find = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->library, symbol));
    if (!fn)
      *unavailable = "NVML library " + library + " has no " + symbol +
                     " (a driver too old for the total-energy counter?)";
    return fn != nullptr;
  };
  if (!find(api->error_string, "nvmlErrorString") || !find(api->init, "nvmlInit_v2") ||
      !find(api->shutdown, "nvmlShutdown") ||
      !find(api->handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !find(api->total_energy, "nvmlDeviceGetTotalEnergyConsumption"))
    return nullptr;
  if (const NvmlReturn status = api->init(); status != kNvmlSuccess) {
    *unavailable = "NVML did not start: nvmlInit_v2 returned " + api->describe(status);
    return nullptr;
  }
  api->initialized = true;
  NvmlDevice device = nullptr;
  if (const NvmlReturn status = api->handle_by_pci_bus_id(pci_bus_id.c_str(), &device);
      status != kNvmlSuccess) {
    *unavailable = "NVML finds no GPU at PCI bus id " + pci_bus_id + ": " + api->describe(status);
    return nullptr;
  }
  unsigned long long mj = 0;
  if (const NvmlReturn status = api->total_energy(device, &mj); status != kNvmlSuccess) {
    const std::string gpu = "GPU " + pci_bus_id;
    if (status == kNvmlNotSupported)
      *unavailable = gpu + " has no total-energy counter (NVML: " + api->describe(status) +
                     "; Volta and later GPUs have one)";
    else if (status == kNvmlNoPermission)
      *unavailable =
          "NVML refuses this user the energy counter of " + gpu + ": " + api->describe(status);
    else
      *unavailable = "cannot read the energy counter of " + gpu +
                     ": nvmlDeviceGetTotalEnergyConsumption returned " + api->describe(status);
    return nullptr;
  }
  return std::unique_ptr<NvmlEnergy>(new NvmlEnergy(std::move(api), device, pci_bus_id));
}

NvmlEnergy::NvmlEnergy(std::unique_ptr<Api> api, void* device, std::string pci_bus_id)
    : api_(std::move(api)), device_(device), pci_bus_id_(std::move(pci_bus_id)) {}

NvmlEnergy::~NvmlEnergy() = default;

std::vector<uint64_t> NvmlEnergy::read() const {
  unsigned long long mj = 0;
  const NvmlReturn status = api_->total_energy(device_, &mj);
  CAMPO_CHECK(status == kNvmlSuccess, "cannot read the energy counter of GPU ", pci_bus_id_,
              " any more (it was readable when the benchmark started): ", api_->describe(status));
  return {uint64_t(mj)};
}

double NvmlEnergy::joules_between(const std::vector<uint64_t>& before,
                                  const std::vector<uint64_t>& after) const {
  CAMPO_CHECK(before.size() == 1 && after.size() == 1, "internal: NVML readings of ", before.size(),
              " and ", after.size(), " values, not 1");
  CAMPO_CHECK(after[0] >= before[0], "the energy counter of GPU ", pci_bus_id_, " went back from ",
              before[0], " to ", after[0], " mJ (the NVIDIA driver was reloaded during the run?)");
  return double(after[0] - before[0]) * 1e-3;
}

}  // namespace campo
