#include "runtime/energy.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "runtime/check.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

// intel-rapl:<digits>, nothing after (a package zone, not a sub-zone).
bool is_package_zone(const std::string& name) {
  const std::string prefix = "intel-rapl:";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(name.begin() + long(prefix.size()), name.end(),
                     [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::optional<uint64_t> read_counter(const fs::path& file) {
  std::ifstream in(file);
  uint64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<RaplEnergy> RaplEnergy::open(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::nullopt;
  std::vector<std::string> dirs;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec))
    if (is_package_zone(e.path().filename().string())) dirs.push_back(e.path().string());
  std::sort(dirs.begin(), dirs.end());
  RaplEnergy r;
  for (const std::string& d : dirs) {
    const auto now = read_counter(fs::path(d) / "energy_uj");
    const auto range = read_counter(fs::path(d) / "max_energy_range_uj");
    if (!now || !range || *range == 0) continue;
    r.zones_.push_back(d);
    r.ranges_.push_back(*range);
  }
  if (r.zones_.empty()) return std::nullopt;
  return r;
}

std::vector<uint64_t> RaplEnergy::read() const {
  std::vector<uint64_t> v;
  for (const std::string& z : zones_) {
    const auto now = read_counter(fs::path(z) / "energy_uj");
    CAMPO_CHECK(now.has_value(), "cannot read the RAPL counter ", z,
                "/energy_uj any more (it was readable when the benchmark started)");
    v.push_back(*now);
  }
  return v;
}

double RaplEnergy::joules_between(const std::vector<uint64_t>& before,
                                  const std::vector<uint64_t>& after) const {
  CAMPO_CHECK(before.size() == zones_.size() && after.size() == zones_.size(),
              "internal: RAPL readings of ", before.size(), " and ", after.size(), " zones, not ",
              zones_.size());
  uint64_t uj = 0;
  for (size_t i = 0; i < zones_.size(); ++i)
    uj += after[i] >= before[i] ? after[i] - before[i] : after[i] + ranges_[i] - before[i];
  return double(uj) * 1e-6;
}

std::string rapl_unavailable_reason(const std::string& root) {
  return "no readable RAPL counters under " + root;
}

}  // namespace campo
