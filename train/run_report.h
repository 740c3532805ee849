// What a training run shows and records as it goes: the observer the one training loop
// (train/loop.h's run_training) calls at each point of a run. The loop decides when a step,
// a checkpoint or an evaluation happens; this decides what is said of it: the banner, the
// progress (a bar on a terminal or log lines: each value's recent mean, samples/s, ETA, the
// loss scale), --metrics and --tensorboard (train/metrics_log.h), the checkpoint and
// accuracy lines, --profile's table and the JSON result line. Only the log's rank writes.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/timer.h"
#include "graph/memory_report.h"
#include "train/loop_options.h"
#include "train/session.h"

namespace campo {

class Dataset;
class DeviceReport;
class MetricsLog;

// The run as the loop lays it out before its first step.
struct RunLayout {
  int models = 1;
  int64_t per_epoch = 0, total_steps = 0;
  int64_t global_batch = 0;  // one model's samples of a step, every rank's together
  int world = 1;             // ranks
  const Dataset* data = nullptr;  // the (first model's) training set
};

class RunReport {
 public:
  RunReport(const Session& session, const TrainingLoopOptions& o, const DeviceReport& device,
            const RunLayout& layout, std::ostream& log);
  ~RunReport();

  // "campo: training <what> on <data>, ...": before anything else.
  void banner();
  // Where a resumed run continues.
  void resumed(const std::string& path, int64_t step, int epoch, int64_t batch);
  // The steps begin at `first_step` (after a resume's): --metrics and --tensorboard open (a
  // resumed run continues them) and the throughput's clock starts.
  void start(int64_t first_step);
  // After each step: the progress display and, at the logged steps, the metrics. `values`:
  // [model][value][step] of this run so far; `lr`: the step's rates.
  void step(int epoch, int64_t in_epoch, int64_t step, bool last, const std::vector<float>& lr,
            const std::vector<std::vector<std::vector<float>>>& values);
  // --numerics: what step `step`'s casts lost, as `recorder` holds it (--metrics, --tensorboard).
  void numerics(int64_t step, const NumericsRecorder& recorder);
  // An interrupted run stops after its step: the bar's line is ended.
  void interrupted();
  // The steps are done: r's samples/s and final values (each value's mean over the last 50
  // steps), and a line per checkpoint written.
  void trained(TrainingLoopResult& r);
  // The evaluation's accuracies (per model) after `step` steps.
  void evaluated(int64_t step, const std::vector<double>& accuracy);
  // The end of the run: the CUDA graph line, --profile's table and the JSON result line;
  // r.wall_seconds is `wall`'s time. `memory`: the session's, as the run ends.
  void finish(TrainingLoopResult& r, const MemoryReport& memory, const Timer& wall);

  Progress progress() const { return progress_; }

 private:
  // Each model's mean of value `value` over its last `window` steps.
  std::vector<double> recent(const std::vector<std::vector<std::vector<float>>>& values,
                             size_t value, size_t window) const;

  const Session& session_;
  const TrainingLoopOptions& o_;
  const DeviceReport& device_;
  const RunLayout layout_;
  std::ostream& log_;
  const Progress progress_;
  const std::vector<StepValue> values_;
  const LossScaler* scaler_;
  const bool scaling_;
  const PrecisionSummary summary_;
  const bool auto_low_;  // --low-precision auto under cost-aware: f16 and bf16 per node
  std::unique_ptr<MetricsLog> metrics_;
  Timer train_timer_;
  Communicator::Stats comm_before_;
  int64_t first_step_ = 0;
  double last_print_ = -1;
};

// The table of --profile: time per op kind (name -> ms, largest first) over `steps`.
void print_profile(const std::vector<std::pair<std::string, double>>& ms_by_op, int64_t steps,
                   std::ostream& log);

}  // namespace campo
