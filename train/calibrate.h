// `campo calibrate`: the offline calibration of the cost-aware policy on this machine
// (DESIGN.md "The cost-aware policy", step 3). Times every node of the training graphs of
// the reference models at several batch sizes in f32 and with every allow/infer/clear op
// in low precision, plus standalone casts of 2^10..2^24 elements in both directions; fits
// the per-op models and the cast model (amp/calibration.h) on 3/4 of the configurations,
// scores them on the other 1/4 (whole configurations held out, not random nodes), prints a
// report and writes the JSON file the profiling step loads.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "amp/calibration.h"
#include "runtime/backend.h"

namespace campo {

struct CalibrateOptions {
  DeviceSpec device;  // --device; a device without a backend here is an error
  std::string out;  // empty: default_calibration_path (train/profiling.h)
  // No configuration starts that would overrun it (the minimal set runs regardless).
  double budget_minutes = 0;           // 0: 10 minutes, 1 with `quick`
  std::string low_precision = "bf16";  // bf16 | fp16
  bool quick = false;  // ~1 minute: LeNet, ResNet-18 and DCGAN at small batches, fewer steps
  // A narrower calibration set (tests, experiments): only these models (lenet, resnet18,
  // resnet50, vgg16, dcgan) and batch sizes; empty: all.
  std::vector<std::string> models;
  std::vector<int64_t> batches;
  uint64_t seed = 42;
  // Also write every measured sample (op, features, f32 and low-precision ms, held out or
  // not; casts) as JSON, to study other model forms offline.
  std::string samples_out;
};

// Runs the calibration, prints the report to `log`, writes opts.out (or the default path)
// and returns what it wrote.
Calibration run_calibration(const CalibrateOptions& opts, std::ostream& log);

// The calibration a cost-aware run uses when none is named: find_default_calibration, else
// a quick automatic calibration (budget 1 minute, said on `log`) written to the cache.
// `path` (when given) gets the file.
std::shared_ptr<const Calibration> default_calibration(DType low, std::ostream& log,
                                                       std::string* path = nullptr);

}  // namespace campo
