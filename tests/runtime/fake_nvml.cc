// A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so.1), built by CMake as the
// shared library campo_fake_nvml and loaded by the tests through the path NvmlEnergy::open
// is given (or CAMPO_NVML_LIBRARY): the C entry points runtime/nvml_energy.cc uses, with
// NVML's return codes, and one GPU.
//
// What it answers comes from a state file named by $CAMPO_FAKE_NVML_STATE, read at every
// call, so a test changes the counter between two readings by rewriting it. Whitespace-
// separated keys and values, any subset, in any order:
//   init <code>            what nvmlInit_v2 returns (default 0, NVML_SUCCESS)
//   bus_id <id>            the PCI bus id of its one GPU (default 0000:65:00.0)
//   energy_mj <n>          the total-energy counter, millijoules (default 0)
//   energy_result <code>   what nvmlDeviceGetTotalEnergyConsumption returns (default 0)
// No variable or no file: the defaults. Also exported for the tests: campo_fake_nvml_inits(),
// the nvmlInit_v2 calls not yet matched by nvmlShutdown.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct State {
  int init = 0;
  std::string bus_id = "0000:65:00.0";
  unsigned long long energy_mj = 0;
  int energy_result = 0;
};

State read_state() {
  State s;
  const char* path = std::getenv("CAMPO_FAKE_NVML_STATE");
  if (!path) return s;
  FILE* f = std::fopen(path, "r");
  if (!f) return s;
  char key[64], value[128];
  while (std::fscanf(f, "%63s %127s", key, value) == 2) {
    if (std::strcmp(key, "init") == 0) s.init = std::atoi(value);
    if (std::strcmp(key, "bus_id") == 0) s.bus_id = value;
    if (std::strcmp(key, "energy_mj") == 0) s.energy_mj = std::strtoull(value, nullptr, 10);
    if (std::strcmp(key, "energy_result") == 0) s.energy_result = std::atoi(value);
  }
  std::fclose(f);
  return s;
}

int inits = 0;    // nvmlInit_v2 successes not yet shut down
int the_gpu = 0;  // its handle is this object's address
constexpr int kUninitialized = 1, kInvalidArgument = 2, kNotFound = 6;

}  // namespace

extern "C" {

int campo_fake_nvml_inits() { return inits; }

int nvmlInit_v2() {
  const int code = read_state().init;
  if (code == 0) ++inits;
  return code;
}

int nvmlShutdown() {
  if (inits == 0) return kUninitialized;
  --inits;
  return 0;
}

const char* nvmlErrorString(int code) {
  switch (code) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 6:
      return "Not Found";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (inits == 0) return kUninitialized;
  if (!bus_id || !device) return kInvalidArgument;
  if (read_state().bus_id != bus_id) return kNotFound;
  *device = &the_gpu;
  return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* energy) {
  if (inits == 0) return kUninitialized;
  if (device != &the_gpu || !energy) return kInvalidArgument;
  const State s = read_state();
  if (s.energy_result != 0) return s.energy_result;
  *energy = s.energy_mj;
  return 0;
}

}  // extern "C"
