// The default calibration lookup (train/profiling.h): $CAMPO_CALIBRATION, the per-user
// cache, another machine's file skipped with a note, a stale one skipped, a corrupt one refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "perf/calibrate.h"
#include "perf/calibration_store.h"
#include "tests/amp/calibration_test_util.h"
#include "tests/test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;
using testing::sample_calibration;
using testing::ScopedEnv;
using testing::TempFile;

TEST(CalibrationLookupTest, EnvironmentCacheAndErrors) {
  const fs::path dir =
      fs::temp_directory_path() / ("campo_calib_cache_" + std::to_string(getpid()));
  fs::remove_all(dir);
  ScopedEnv cache("XDG_CACHE_HOME", dir.string());
  ScopedEnv none("CAMPO_CALIBRATION", "");
  std::ostringstream log;
  // Nothing in the cache (and no calibration/ folder next to the build of this test unless
  // the repository has one for this machine, which it may: only the cache path is checked).
  const Backend& cpu = *default_cpu_backend();
  const std::string cache_path = default_calibration_path(cpu, DType::bf16);
  EXPECT_EQ(cache_path.rfind(dir.string(), 0), 0u) << cache_path;
  EXPECT_NE(cache_path.find(cpu.identity().hardware_hash()), std::string::npos);

  // This machine's file in the cache is found.
  fs::create_directories(fs::path(cache_path).parent_path());
  save_calibration(sample_calibration(), cache_path);
  std::string used;
  auto cal = find_default_calibration(cpu, DType::bf16, log, &used);
  ASSERT_TRUE(cal);
  EXPECT_EQ(used, cache_path);
  EXPECT_EQ(cal->ops.size(), 3u);
  // Another machine's file in the cache is skipped with a note.
  {
    nlohmann::json j;
    std::ifstream(cache_path) >> j;
    j["machine"]["cpu_model"] = "Imaginary CPU 9000";
    std::ofstream(cache_path) << j.dump();
  }
  log.str("");
  find_default_calibration(cpu, DType::bf16, log);
  EXPECT_NE(log.str().find("skipping " + cache_path), std::string::npos) << log.str();
  // A stale one (another campo, oneDNN or format version) is skipped with a note: the cache
  // is remade, not refused.
  {
    nlohmann::json j;
    std::ifstream(cache_path) >> j;
    j["machine"]["cpu_model"] = cpu.identity().find("cpu_model")->value;
    j["version"] = 0;
    std::ofstream(cache_path) << j.dump();
  }
  log.str("");
  used.clear();
  find_default_calibration(cpu, DType::bf16, log, &used);  // the repository's, if it has one
  EXPECT_NE(used, cache_path);
  EXPECT_NE(log.str().find("skipping " + cache_path + ": is stale (format version 0"),
            std::string::npos)
      << log.str();
  // A corrupt one is an error.
  std::ofstream(cache_path) << "{";
  EXPECT_THROW(find_default_calibration(cpu, DType::bf16, log), Error);
  fs::remove(cache_path);

  // $CAMPO_CALIBRATION wins, and must be usable.
  TempFile f("env.json");
  save_calibration(sample_calibration(), f.path);
  {
    ScopedEnv e("CAMPO_CALIBRATION", f.path);
    cal = find_default_calibration(cpu, DType::bf16, log, &used);
    ASSERT_TRUE(cal);
    EXPECT_EQ(used, f.path);
    EXPECT_THROW(find_default_calibration(cpu, DType::f16, log), Error);  // made for bf16
  }
  f.write("{}");
  {
    ScopedEnv e("CAMPO_CALIBRATION", f.path);
    EXPECT_THROW(find_default_calibration(cpu, DType::bf16, log), Error);
  }
  fs::remove_all(dir);
}

// One default file per device kind and machine: the strict backend's is not the CPU's, and
// the CPU's calibration is skipped on it as another device's.
TEST(CalibrationLookupTest, EachDeviceKindHasItsOwnDefaultFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("campo_calib_kinds_" + std::to_string(getpid()));
  fs::remove_all(dir);
  ScopedEnv cache("XDG_CACHE_HOME", dir.string());
  ScopedEnv none("CAMPO_CALIBRATION", "");
  const std::shared_ptr<Backend> cpu = default_cpu_backend();
  const std::shared_ptr<Backend> strict = make_backend({Device::cpu_strict, 0});
  const std::string cpu_path = default_calibration_path(*cpu, DType::bf16);
  const std::string strict_path = default_calibration_path(*strict, DType::bf16);
  EXPECT_NE(cpu_path, strict_path);
  fs::create_directories(fs::path(strict_path).parent_path());
  save_calibration(sample_calibration(), strict_path);  // a CPU's calibration in the wrong place
  std::ostringstream log;
  EXPECT_EQ(find_default_calibration(*strict, DType::bf16, log), nullptr);
  EXPECT_NE(log.str().find("skipping " + strict_path + ": another machine's or device's"),
            std::string::npos)
      << log.str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace campo
