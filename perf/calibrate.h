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
#include "perf/calibration_noise.h"
#include "runtime/backend.h"
#include "runtime/check.h"

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
  // The noise a calibration may have (perf/calibration_noise.h): a measurement past them is
  // redone, and the calibration refused (nothing written) when it stays past them.
  NoiseLimits noise;
};

// A calibration refused for noise: nothing was written. Its message is the one line to show.
class CalibrationRefused : public Error {
 public:
  explicit CalibrationRefused(const std::string& message) : Error(message, "calibration noise") {}
};

// Runs the calibration, prints the report to `log`, writes opts.out (or the default path)
// and returns what it wrote. Each measurement (the standalone casts, each configuration) is
// timed opts.noise.repeats times and judged for noise as it is made; one too noisy is redone,
// and when it stays too noisy (or identical shapes disagree beyond the limit at the end) the
// calibration throws CalibrationRefused and writes nothing. The file records how it was made
// (Calibration::record).
Calibration run_calibration(const CalibrateOptions& opts, std::ostream& log);

// One node timed in both precisions, as the calibration times them.
struct TimedNode {
  OpKind kind{};
  NodeFeatures features{};
  NodeShape shape;
  double fp32_ms = 0, low_ms = 0;
};
// A few of the calibration's configurations timed again (for `campo calibrate --check`):
// `models` (names as CalibrateOptions::models) at batch `batch`, `repeats` timed steps each,
// both precisions interleaved, with the load of other processes and the repeat spread read
// around them.
struct TimedSample {
  std::vector<TimedNode> nodes;
  std::vector<std::string> configurations;  // as the calibration names them
  double load = -1;                         // cores' worth, -1 unknown
  int cores = 0;
  double spread = 0;  // the largest repeat spread of a graph
  double seconds = 0;
};
TimedSample time_calibration_sample(const std::shared_ptr<Backend>& backend, DType low,
                                    const std::vector<std::string>& models, int64_t batch,
                                    int repeats, uint64_t seed = 42);

// `campo calibrate --compare-fits SAMPLES`: the op models fitted again, in each form (the
// linear model of the analytic features, the shape features, the shape table:
// fit_op_model_by_shape), on a --samples file of an earlier calibration, measuring nothing;
// prints the table of their held-out errors per op model, before (linear) and after (the
// form cross-validation chooses), as Markdown. One error line for a file that is not such a
// dump, or one written before samples recorded their shapes.
void compare_fits(const std::string& samples_path, std::ostream& out);

// Where `campo calibrate` writes by default for `backend` and the first place looked in:
// $XDG_CACHE_HOME/campo/ (else ~/.cache/campo/) calibration-<identity hash>-<low>.json, the
// hash of the backend's identity without its versions (BackendIdentity::hardware_hash): one
// file per device kind and machine. Empty when neither XDG_CACHE_HOME nor HOME is set.
std::string default_calibration_path(const Backend& backend, DType low);

}  // namespace campo
