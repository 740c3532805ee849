// `campo calibrate`: the offline calibration of the cost-aware policy on this machine
// (DESIGN.md "The cost-aware policy", step 3). Times every node of the training graphs of
// the reference models (and BERT's batched attention products) at several batch sizes in f32 and
// with every allow/infer/clear op in low precision, plus standalone casts of 2^10..2^24 elements in
// both directions; fits the per-op models and the cast model (amp/calibration.h) on 3/4 of the
// configurations, scores them on the other 1/4 (whole configurations held out, not random nodes),
// prints a report and writes the JSON file the profiling step loads.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "amp/calibration.h"
#include "amp/policy.h"
#include "runtime/backend.h"

namespace campo {

struct CalibrateOptions {
  DeviceSpec device;  // --device; a device without a backend here is an error
  std::string out;    // empty: default_calibration_path (below)
  // No configuration starts that would overrun it (the minimal set runs regardless).
  double budget_minutes = 0;           // 0: 10 minutes, 1 with `quick`
  std::string low_precision = "bf16";  // bf16 | fp16
  // ~1 minute: LeNet, ResNet-18, DCGAN and the attention products at small batches, fewer
  // steps.
  bool quick = false;
  // A narrower calibration set (tests, experiments): only these models (lenet, resnet18,
  // resnet50, vgg16, dcgan, and "attention": BERT's six BatchMatMulV2 products of one
  // attention layer, forward and backward, at T=64 with 4 heads and T=128 with 12, head
  // size 64) and batch sizes; empty: all.
  std::vector<std::string> models;
  std::vector<int64_t> batches;
  uint64_t seed = 42;
  // Also write every measured sample (op, features, f32 and low-precision ms, held out or
  // not; casts) as JSON, to study other model forms offline.
  std::string samples_out;
  // Also write every sample whose hardware counters were read, with its times, as a
  // recorded counter table (runtime/hardware_counters.h), the format the counter tests read.
  // One error line, before any measurement, on a device that reads no counters.
  std::string counters_out;
};

// Runs the calibration, prints the report to `log`, writes opts.out (or the default path)
// and returns what it wrote.
Calibration run_calibration(const CalibrateOptions& opts, std::ostream& log);

// Where `campo calibrate` writes by default for `backend` and the first place looked in:
// $XDG_CACHE_HOME/campo/ (else ~/.cache/campo/) calibration-<identity hash>-<low>.json, the
// hash of the backend's identity without its versions (BackendIdentity::hardware_hash): one
// file per device kind and machine. Empty when neither XDG_CACHE_HOME nor HOME is set.
std::string default_calibration_path(const Backend& backend, DType low);

// The calibration of `backend`'s machine for `low`, or null, saying on `log` what it did:
//  1. $CAMPO_CALIBRATION when set: used, or an error if it cannot be (any problem);
//  2. the cache file default_calibration_path(backend, low);
//  3. the *.json files of the repository's calibration/ folder (CAMPO_SOURCE_DIR when the
//     build defines it, else ../../calibration from this executable).
// In 2 and 3 a file made on another machine or device (or for another low precision) is
// skipped with a note; a corrupt or stale one is an error. `path` (when given) gets the
// file used.
std::shared_ptr<const Calibration> find_default_calibration(const Backend& backend, DType low,
                                                            std::ostream& log,
                                                            std::string* path = nullptr);

// The calibration a cost-aware run on `backend` uses when none is named:
// find_default_calibration; else on the CPU a quick automatic calibration (budget 1 minute,
// said on `log`) written to the cache, and elsewhere (a GPU) none, said on `log`: there the
// profiling step times both precisions of the run's own graph, which takes milliseconds,
// where an automatic calibration would take a minute. `path` (when given) gets the file.
std::shared_ptr<const Calibration> default_calibration(const Backend& backend, DType low,
                                                       std::ostream& log,
                                                       std::string* path = nullptr);

// Sets p.calibration for a cost-aware policy run on `backend` as `calibration` says (a
// file, checked against the backend's identity; "" = default_calibration; "none" = none, the
// profiling step times both precisions); what it looked for or ran goes to `log`. Other
// policies: unchanged.
void attach_calibration(PrecisionConfig& p, const std::string& calibration, const Backend& backend,
                        std::ostream& log);
// The option check of the above, before any backend or work: a calibration file named for a
// cost-aware run must be readable and made for the kind of `device` (a CPU's costs on
// --device cuda are one error line, as a GPU's on the CPU).
void check_calibration_device(const std::string& calibration, Precision policy,
                              const DeviceSpec& device);

}  // namespace campo
