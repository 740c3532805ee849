// Test helpers shared by the calibration tests (tests/amp, tests/train): the CPU backend's
// identity, a calibration this machine accepts, and a temporary file removed at the end of
// its scope.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "amp/calibration.h"
#include "runtime/backend.h"

namespace campo::testing {

// The identity calibrations of this machine's CPU are keyed by.
inline BackendIdentity cpu_identity() { return default_cpu_backend()->identity(); }

// A calibration that this machine accepts, with two op models.
inline Calibration sample_calibration() {
  Calibration cal;
  cal.machine = cpu_identity();
  cal.campo_version = CAMPO_VERSION;
  cal.created = "2024-01-01T00:00:00Z";
  cal.hardware_counters = "unavailable: test";
  cal.cast = {0.01, 1e-6};
  cal.cast_all = {{0.01, 1e-6}, 30, 12.5};
  cal.cast_to_low = {{0.011, 1.1e-6}, 15, 10.0};
  cal.cast_to_f32 = {{0.009, 0.9e-6}, 15, 11.0};
  OpModel mm;
  mm.key = "MatMul";
  mm.features = {Feature::flops};
  mm.rho = {0.9};
  mm.weights = {1e-9};
  mm.sigma = 0.5;
  mm.bias = 0.0;
  mm.train_samples = 30;
  mm.heldout_samples = 10;
  mm.train_mape = 5;
  mm.heldout_mape = 7.5;
  cal.ops[mm.key] = mm;
  OpModel slow = mm;
  slow.key = "MatMul:unaligned";
  slow.features.clear();
  slow.rho.clear();
  slow.weights.clear();
  slow.sigma = 2.0;
  cal.ops[slow.key] = slow;
  OpModel relu;
  relu.key = "Relu";
  relu.fit = "ratio";
  relu.sigma = 0.8;
  relu.heldout_mape = -1;
  cal.ops[relu.key] = relu;
  cal.configurations = 8;
  cal.heldout_configurations = 2;
  cal.seconds = 12.5;
  return cal;
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              ("campo_calib_" + std::to_string(getpid()) + "_" + name))
                 .string()) {}
  ~TempFile() { std::filesystem::remove(path); }
  nlohmann::json read() const {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  }
  void write(const std::string& text) const { std::ofstream(path) << text; }
};

}  // namespace campo::testing
