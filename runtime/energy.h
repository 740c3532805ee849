// Energy of the CPU packages from RAPL (Running Average Power Limit) counters, read through
// Linux's powercap interface: <root>/intel-rapl:<n>/energy_uj, one package zone per socket
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

class RaplEnergy {
 public:
  // The package zones under `root` whose energy_uj and max_energy_range_uj can be read;
  // nullopt when there are none.
  static std::optional<RaplEnergy> open(const std::string& root = kPowercapRoot);

  // One reading of every zone, in microjoules.
  std::vector<uint64_t> read() const;
  // Joules between two readings of this object, over all zones (wraparound handled).
  double joules_between(const std::vector<uint64_t>& before,
                        const std::vector<uint64_t>& after) const;
  const std::vector<std::string>& zones() const { return zones_; }

 private:
  std::vector<std::string> zones_;  // directories
  std::vector<uint64_t> ranges_;    // max_energy_range_uj of each
};

// The line a report prints when open() found nothing.
std::string rapl_unavailable_reason(const std::string& root = kPowercapRoot);

}  // namespace campo
