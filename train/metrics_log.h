// Training curves written as a run goes, for plotting: `--metrics FILE` (one JSON line per
// logged step and per evaluation) and `--tensorboard DIR` (a TensorBoard event file of
// scalars). Both report the steps the progress lines report (is_logged_step) with the values
// those lines show, and every line or record is flushed once written, so a run that dies
// leaves every one written before complete. The event file is runtime/event_file.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/event_file.h"
#include "runtime/numerics.h"

namespace campo {

// The steps the progress lines (--progress lines) and the metrics log report: every tenth
// of an epoch (every step when an epoch has fewer than 20) and the last step of an epoch or
// of the run. `in_epoch` counts the epoch's batches done (1-based), `last` says the step
// ends its epoch or the run.
bool is_logged_step(int64_t in_epoch, int64_t per_epoch, bool last);

// Checks that --metrics FILE can be written and --tensorboard DIR can be created or written
// (one campo::Error line each, naming the option), before any work; "" is not given.
void check_metrics_outputs(const std::string& metrics_path, const std::string& tensorboard_dir);

// What one logged step reports. The vectors hold one value per model (one for a single
// model, N for --array N).
struct StepMetrics {
  int64_t step = 0;  // batches trained so far in the whole run (a resumed run counts on)
  int epoch = 0;     // 1-based, as the progress line
  // The mean training loss of the last 50 steps (fewer at the start), as the progress line;
  // empty for a session without one loss (DCGAN: its losses go in `named`).
  std::vector<double> losses;
  std::vector<float> lrs;      // the learning rate of this step
  float loss_scale = 1;        // the dynamic loss scale; 1 without loss scaling
  int64_t skipped_steps = 0;   // updates the loss scaler skipped so far
  double samples_per_sec = 0;  // every model's samples, as the progress line
  double rss_mib = 0;          // the process's resident memory in MiB (0: left out)
  // More values per model, each under its name: the JSON field `name` (a list of N in an
  // array) and the scalar train/<name> (train/<name>/model_<i>); e.g. DCGAN's loss_d, loss_g.
  std::vector<std::pair<std::string, std::vector<double>>> named;
};

struct MetricsLogOptions {
  std::string metrics_path;     // --metrics; "" : none
  std::string tensorboard_dir;  // --tensorboard; "" : none
  int models = 1;               // 1: "loss", "lr"; N >= 2 (--array): "losses", "lrs", ...
  // A run resumed from a checkpoint after this many steps (0: a new run). The --metrics
  // file is appended to, after a line {"event":"resume","step":N}; the new event file
  // records a SessionLog START at step N + 1 after its file_version, so TensorBoard drops
  // what an earlier run logged past the checkpoint.
  int64_t resumed_step = 0;
};

// The --metrics lines (numbers in their shortest round-trip text, a float's as a float's):
//   {"event":"train","step":S,"epoch":E,"loss":L,"lr":R,"loss_scale":F,"skipped_steps":K,
//    "samples_per_sec":P,"rss_mib":M}  (an array: "losses":[...], "lrs":[...]; the `named`
//                                       values after the loss; rss_mib when known)
//   {"event":"eval","step":S,"test_accuracy":A}     (an array: "test_accuracies":[...])
//   {"event":"numerics","step":S,"node":"fc1.MatMul","operand":"a","pass":"forward",
//    "format":"e4m3","elements":N,"amax":A,"scale":C,"underflow":U,"saturated":T,
//    "overflow":O,"nan":K,"inf":I}             (--numerics: one line per recorded tensor;
//                                              U, T, O fractions of N; K, I counts; C null
//                                              where no per-tensor scale applies)
// The TensorBoard scalars: train/loss, train/lr, train/loss_scale, train/samples_per_sec,
// train/rss_mib,
// eval/accuracy (an array: train/loss/model_<i>, train/lr/model_<i>, eval/accuracy/model_<i>),
// numerics/<node>/<operand>/{amax,scale,underflow,saturated,overflow,nan,inf}.
class MetricsLog {
 public:
  // Opens the outputs the options name (a new --tensorboard directory is created); nothing
  // when neither is given. One campo::Error line when one cannot be opened.
  explicit MetricsLog(const MetricsLogOptions& options);
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  bool enabled() const { return metrics_ != nullptr || events_ != nullptr; }
  void log_step(const StepMetrics& m);
  // The test accuracy of each model after `step` steps.
  void log_eval(int64_t step, const std::vector<double>& accuracy);
  // --numerics: what the casts of step `step` lost, one record per entry (each written).
  void log_numerics(int64_t step, const std::vector<NumericsEntry>& entries);
  // The event file written ("" without --tensorboard).
  std::string event_file() const { return events_ ? events_->path() : ""; }

 private:
  void write_line(const std::string& json);
  void check_models(size_t count, const char* what) const;

  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  using File = std::unique_ptr<std::FILE, CloseFile>;

  MetricsLogOptions options_;
  File metrics_;
  std::unique_ptr<EventFileWriter> events_;
};

}  // namespace campo
