// Energy counters read around a window of work, behind one interface (EnergyMeter): the CPU's
// RAPL counters here, a GPU's NVML counter in runtime/nvml_energy.h; the one that measures a
// backend's device is runtime/device_energy.h's (open_device_energy).
//
// RAPL (Running Average Power Limit): the CPU packages' counters, read through Linux's
// powercap interface: <root>/intel-rapl:<n>/energy_uj, one package zone per socket
// (AMD's Zen CPUs expose the same zone names). Sub-zones (intel-rapl:<n>:<m>: cores, uncore,
// DRAM) are parts of their package and are not added again; intel-rapl-mmio zones repeat the
// package counter and are skipped too.
//
// Each counter counts microjoules up to max_energy_range_uj and then wraps to 0; an interval
// reads  after - before  or, when after < before (one wrap),  after + range - before.
// Counters measure the whole package: every process on the machine, not only this one.
// Recent kernels let only root read energy_uj; then, as on machines without RAPL (virtual
// machines), energy is not available.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace campo {

inline constexpr const char* kPowercapRoot = "/sys/class/powercap";

// A device's cumulative energy counter. A reading is opaque to callers (one value per
// counter, in the counter's unit); joules_between turns two readings into the joules spent
// between them. Read after the device has finished its queued work (Backend::synchronize),
// or the window holds work issued outside it.
class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  // What is read, for reports and JSON: "rapl", "nvml".
  virtual const char* source() const = 0;
  // How often the counter is refreshed: a window not much longer than this is quantized to
  // the refreshes it happens to span, so its figure is not reliable.
  virtual double update_period_seconds() const = 0;
  virtual std::vector<uint64_t> read() const = 0;
  virtual double joules_between(const std::vector<uint64_t>& before,
                                const std::vector<uint64_t>& after) const = 0;
};

class RaplEnergy final : public EnergyMeter {
 public:
  // The package zones under `root` whose energy_uj and max_energy_range_uj can be read;
  // nullopt when there are none.
  static std::optional<RaplEnergy> open(const std::string& root = kPowercapRoot);

  const char* source() const override { return "rapl"; }
  // Intel documents an update about every millisecond.
  double update_period_seconds() const override { return 1e-3; }
  // One reading of every zone, in microjoules.
  std::vector<uint64_t> read() const override;
  // Joules between two readings of this object, over all zones (wraparound handled).
  double joules_between(const std::vector<uint64_t>& before,
                        const std::vector<uint64_t>& after) const override;
  const std::vector<std::string>& zones() const { return zones_; }

 private:
  std::vector<std::string> zones_;  // directories
  std::vector<uint64_t> ranges_;    // max_energy_range_uj of each
};

// The line a report prints when open() found nothing.
std::string rapl_unavailable_reason(const std::string& root = kPowercapRoot);

}  // namespace campo
