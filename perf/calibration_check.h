// `campo calibrate --check`: whether a calibration file still fits this machine. A few of the
// calibration's configurations are timed again in both precisions and their nodes' measured
// times compared with what the file predicts: the f32 times with its f32 models, the
// low-precision times with its per-op models (from the measured f32 times). The rule is
// amp/calibration.h's (kMinFitRatio..kMaxFitRatio on the median and the total of measured /
// predicted), the one the profiling step applies to every cost-aware run.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "amp/calibration.h"
#include "perf/calibration_noise.h"
#include "runtime/device.h"

namespace campo {

struct CalibrationCheckOptions {
  DeviceSpec device;
  std::string calibration;  // the file; empty: this machine's (find_default_calibration)
  // What is re-timed: these of the calibration's shapes at this batch size.
  std::vector<std::string> models = {"lenet", "resnet18", "dcgan", "attention"};
  int64_t batch = 4;
  NoiseLimits noise;  // a noisy re-timing is redone (noise.retries) before it is judged
};

// The exit status of `campo calibrate --check` is the verdict's value.
enum class FitVerdict : int {
  fits = 0,
  misfit = 2,
  // Measured slower than predicted while other processes were busy: load alone can explain it.
  inconclusive = 3
};

struct CalibrationCheckResult {
  FitVerdict verdict = FitVerdict::fits;
  std::string file;
  Agreement f32, low;  // f32: unchecked (0 nodes) for a file without f32 models
  double load = -1;
  int cores = 0;
};

// Re-times, compares and prints the verdict with its numbers to `out`.
CalibrationCheckResult check_calibration_fit(const CalibrationCheckOptions& o, std::ostream& out);

}  // namespace campo
