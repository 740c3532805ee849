// NVML energy through the fake NVML library (tests/runtime/fake_nvml.cc, built by CMake as
// campo_fake_nvml): the counter and its delta over a window; each reason energy is not
// available (no library, not NVML, init, no such GPU, no counter, no permission); NVML's
// init/shutdown balance; the library override; and which counter open_device_energy picks
// for a CPU and for a GPU backend. No GPU is needed; the real libnvidia-ml.so.1 is not
// touched.
#include "runtime/nvml_energy.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/cpu_backend.h"
#include "runtime/device_energy.h"
#include "runtime/pci_device.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::ScopedEnv;
using testing::TempDir;

constexpr const char* kBusId = "0000:65:00.0";  // the fake's GPU unless its state names another

// The fake library, loaded for the whole test (so its counters outlive every NvmlEnergy),
// and its state file, named by $CAMPO_FAKE_NVML_STATE.
class NvmlEnergyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    library_ = dlopen(CAMPO_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library_, nullptr) << dlerror();
    inits_ = reinterpret_cast<int (*)()>(dlsym(library_, "campo_fake_nvml_inits"));
    ASSERT_NE(inits_, nullptr);
    ASSERT_EQ(inits_(), 0) << "an earlier test left NVML initialized";
  }
  void TearDown() override {
    if (inits_) EXPECT_EQ(inits_(), 0) << "nvmlInit_v2 without nvmlShutdown";
    if (library_) dlclose(library_);
  }
  void set_state(const std::string& text) { std::ofstream(state_) << text << "\n"; }
  std::unique_ptr<NvmlEnergy> open(std::string* unavailable, const std::string& bus_id = kBusId) {
    return NvmlEnergy::open(CAMPO_FAKE_NVML, bus_id, unavailable);
  }

  TempDir dir_;
  std::string state_ = dir_.file("nvml_state");
  ScopedEnv env_{"CAMPO_FAKE_NVML_STATE", state_};
  void* library_ = nullptr;
  int (*inits_)() = nullptr;
};

TEST_F(NvmlEnergyTest, ReadsMillijoulesAndTheJoulesOfAWindow) {
  set_state("energy_mj 1234567");
  std::string unavailable;
  auto nvml = open(&unavailable);
  ASSERT_NE(nvml, nullptr) << unavailable;
  EXPECT_EQ(unavailable, "");
  EXPECT_EQ(inits_(), 1);  // one nvmlInit_v2 while it is open
  EXPECT_STREQ(nvml->source(), "nvml");
  EXPECT_DOUBLE_EQ(nvml->update_period_seconds(), 0.1);
  EXPECT_EQ(nvml->pci_bus_id(), kBusId);
  const std::vector<uint64_t> before = nvml->read();
  EXPECT_EQ(before, (std::vector<uint64_t>{1234567}));
  set_state("energy_mj 1236067");  // 1.5 J later
  const std::vector<uint64_t> after = nvml->read();
  EXPECT_DOUBLE_EQ(nvml->joules_between(before, after), 1.5);
  EXPECT_DOUBLE_EQ(nvml->joules_between(after, after), 0.0);
  nvml.reset();
  EXPECT_EQ(inits_(), 0);  // shut down with the meter
}

TEST_F(NvmlEnergyTest, FindsTheGpuByItsPciBusId) {
  set_state("bus_id 0000:b3:00.0 energy_mj 5");
  std::string unavailable;
  auto nvml = open(&unavailable, "0000:b3:00.0");
  ASSERT_NE(nvml, nullptr) << unavailable;
  EXPECT_EQ(nvml->read(), (std::vector<uint64_t>{5}));
  nvml.reset();
  EXPECT_EQ(open(&unavailable, kBusId), nullptr);
  EXPECT_EQ(unavailable, "NVML finds no GPU at PCI bus id 0000:65:00.0: Not Found (NVML error 6)");
}

TEST_F(NvmlEnergyTest, MissingLibraryIsOneLine) {
  const std::string missing = dir_.file("no/libnvidia-ml.so.1");
  std::string unavailable;
  EXPECT_EQ(NvmlEnergy::open(missing, kBusId, &unavailable), nullptr);
  EXPECT_TRUE(contains(unavailable, "cannot load NVML, the NVIDIA driver's library (" + missing));
  EXPECT_TRUE(contains(unavailable, "CAMPO_NVML_LIBRARY names another path)"));
  EXPECT_EQ(unavailable.find('\n'), std::string::npos) << unavailable;
}

// A library that is not NVML (or an NVML too old for the counter): the first missing entry
// point. The C library is loaded in every process and has none of them.
TEST_F(NvmlEnergyTest, LibraryWithoutNvmlsEntryPointsIsOneLine) {
  std::string unavailable;
  EXPECT_EQ(NvmlEnergy::open("libc.so.6", kBusId, &unavailable), nullptr);
  EXPECT_EQ(unavailable,
            "NVML library libc.so.6 has no nvmlErrorString (a driver too old for the "
            "total-energy counter?)");
}

TEST_F(NvmlEnergyTest, InitFailureIsOneLine) {
  set_state("init 9");  // NVML_ERROR_DRIVER_NOT_LOADED
  std::string unavailable;
  EXPECT_EQ(open(&unavailable), nullptr);
  EXPECT_EQ(unavailable,
            "NVML did not start: nvmlInit_v2 returned Driver Not Loaded (NVML error 9)");
}

TEST_F(NvmlEnergyTest, GpuWithoutTheCounterOrWithoutPermissionIsOneLine) {
  std::string unavailable;
  set_state("energy_result 3");  // NVML_ERROR_NOT_SUPPORTED: before Volta
  EXPECT_EQ(open(&unavailable), nullptr);
  EXPECT_EQ(unavailable,
            "GPU 0000:65:00.0 has no total-energy counter (NVML: Not Supported (NVML error 3); "
            "Volta and later GPUs have one)");
  EXPECT_EQ(inits_(), 0);        // a failed open shuts NVML down again
  set_state("energy_result 4");  // NVML_ERROR_NO_PERMISSION
  EXPECT_EQ(open(&unavailable), nullptr);
  EXPECT_EQ(unavailable,
            "NVML refuses this user the energy counter of GPU 0000:65:00.0: Insufficient "
            "Permissions (NVML error 4)");
  set_state("energy_result 15");  // any other failure: NVML's words and the code
  EXPECT_EQ(open(&unavailable), nullptr);
  EXPECT_EQ(unavailable,
            "cannot read the energy counter of GPU 0000:65:00.0: "
            "nvmlDeviceGetTotalEnergyConsumption returned Unknown Error (NVML error 15)");
}

TEST_F(NvmlEnergyTest, CounterLostOrGoingBackDuringARunIsAnError) {
  set_state("energy_mj 2000");
  std::string unavailable;
  auto nvml = open(&unavailable);
  ASSERT_NE(nvml, nullptr) << unavailable;
  const std::vector<uint64_t> before = nvml->read();
  EXPECT_TRUE(contains(error_message([&] { nvml->joules_between(before, {1000}); }),
                       "the energy counter of GPU 0000:65:00.0 went back from 2000 to 1000 mJ"));
  set_state("energy_result 15");
  EXPECT_EQ(error_message([&] { nvml->read(); }),
            "cannot read the energy counter of GPU 0000:65:00.0 any more (it was readable when "
            "the benchmark started): Unknown Error (NVML error 15)");
}

TEST(NvmlLibraryTest, CampoNvmlLibraryOverridesTheDriversName) {
  {
    ScopedEnv unset("CAMPO_NVML_LIBRARY", std::nullopt);
    EXPECT_EQ(nvml_library_path(), "libnvidia-ml.so.1");
  }
  {
    ScopedEnv empty("CAMPO_NVML_LIBRARY", "");
    EXPECT_EQ(nvml_library_path(), "libnvidia-ml.so.1");
  }
  ScopedEnv named("CAMPO_NVML_LIBRARY", "/opt/driver/libnvidia-ml.so.1");
  EXPECT_EQ(nvml_library_path(), "/opt/driver/libnvidia-ml.so.1");
}

// The CPU's kernels on a backend that says it is a CUDA device: what open_device_energy asks
// of a GPU backend (its kernel device, and the PCI bus id when it is a PciDevice), without
// a GPU.
class GpuLikeBackend : public CpuBackend {
 public:
  DeviceSpec device() const override { return {Device::cuda, 0}; }
  Device kernel_device() const override { return Device::cuda; }
};
class PciGpuLikeBackend final : public GpuLikeBackend, public PciDevice {
 public:
  std::string pci_bus_id() const override { return kBusId; }
};

TEST_F(NvmlEnergyTest, DeviceEnergyIsNvmlForAGpuAndRaplForTheCpu) {
  set_state("energy_mj 42");
  const std::string powercap = dir_.file("powercap");
  DeviceEnergy gpu = open_device_energy(PciGpuLikeBackend(), powercap, CAMPO_FAKE_NVML);
  ASSERT_NE(gpu.meter, nullptr) << gpu.unavailable;
  EXPECT_STREQ(gpu.meter->source(), "nvml");
  EXPECT_EQ(gpu.meter->read(), (std::vector<uint64_t>{42}));
  gpu.meter.reset();

  set_state("energy_result 3");
  gpu = open_device_energy(PciGpuLikeBackend(), powercap, CAMPO_FAKE_NVML);
  EXPECT_EQ(gpu.meter, nullptr);
  EXPECT_TRUE(contains(gpu.unavailable, "has no total-energy counter")) << gpu.unavailable;

  EXPECT_TRUE(contains(
      error_message([&] { open_device_energy(GpuLikeBackend(), powercap, CAMPO_FAKE_NVML); }),
      "internal: the cuda:0 backend names no PCI bus id"));

  // The CPU: RAPL, whatever the NVML library.
  DeviceEnergy cpu = open_device_energy(CpuBackend(), powercap, CAMPO_FAKE_NVML);
  EXPECT_EQ(cpu.meter, nullptr);
  EXPECT_EQ(cpu.unavailable, rapl_unavailable_reason(powercap));
  std::filesystem::create_directories(powercap + "/intel-rapl:0");
  std::ofstream(powercap + "/intel-rapl:0/energy_uj") << "7\n";
  std::ofstream(powercap + "/intel-rapl:0/max_energy_range_uj") << "1000\n";
  cpu = open_device_energy(CpuBackend(), powercap, CAMPO_FAKE_NVML);
  ASSERT_NE(cpu.meter, nullptr) << cpu.unavailable;
  EXPECT_STREQ(cpu.meter->source(), "rapl");
  EXPECT_EQ(cpu.meter->read(), (std::vector<uint64_t>{7}));
}

}  // namespace
}  // namespace campo
