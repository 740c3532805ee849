// RAPL energy through a fake powercap tree: package zones only, wraparound, no counters.
#include "runtime/energy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace campo {
namespace {

using testing::TempDir;

void write_value(const std::string& path, uint64_t v) { std::ofstream(path) << v << "\n"; }

void make_zone(const TempDir& root, const std::string& name, uint64_t energy, uint64_t range) {
  std::filesystem::create_directories(root.file(name));
  write_value(root.file(name + "/energy_uj"), energy);
  write_value(root.file(name + "/max_energy_range_uj"), range);
}

TEST(EnergyTest, SumsPackageZonesAndHandlesWraparound) {
  TempDir root;
  make_zone(root, "intel-rapl:0", 1'000'000, 10'000'000);
  make_zone(root, "intel-rapl:1", 9'500'000, 10'000'000);
  // A sub-zone (DRAM of package 0) and the MMIO copy of the package counter: not added.
  make_zone(root, "intel-rapl:0:0", 5, 10'000'000);
  make_zone(root, "intel-rapl-mmio:0", 5, 10'000'000);
  std::filesystem::create_directories(root.file("intel-rapl"));  // the control type
  const auto rapl = RaplEnergy::open(root.str());
  ASSERT_TRUE(rapl.has_value());
  ASSERT_EQ(rapl->zones().size(), 2u);
  const std::vector<uint64_t> before = rapl->read();
  EXPECT_EQ(before, (std::vector<uint64_t>{1'000'000, 9'500'000}));
  write_value(root.file("intel-rapl:0/energy_uj"), 3'500'000);  // +2.5 J
  write_value(root.file("intel-rapl:1/energy_uj"), 250'000);    // wrapped: +0.75 J
  write_value(root.file("intel-rapl:0:0/energy_uj"), 9'000'000);
  const std::vector<uint64_t> after = rapl->read();
  EXPECT_DOUBLE_EQ(rapl->joules_between(before, after), 2.5 + 0.75);
}

TEST(EnergyTest, NoPowercapOrUnreadableCountersIsNotAvailable) {
  TempDir root;
  EXPECT_FALSE(RaplEnergy::open(root.file("missing")).has_value());
  EXPECT_FALSE(RaplEnergy::open(root.str()).has_value());          // empty: no zones
  std::filesystem::create_directories(root.file("intel-rapl:0"));  // no energy_uj
  EXPECT_FALSE(RaplEnergy::open(root.str()).has_value());
  EXPECT_EQ(rapl_unavailable_reason(root.str()), "no readable RAPL counters under " + root.str());
}

}  // namespace
}  // namespace campo
