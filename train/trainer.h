// The training driver behind `campo train`: builds the one-step training graph (forward,
// loss, backward, optimizer; train/training_graph.h) and the evaluation graph over one
// VariableStore, runs epochs with a progress display, evaluates on the test split and
// reports metrics.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/policy.h"
#include "datasets/dataset.h"
#include "datasets/registry.h"
#include "graph/executor.h"
#include "graph/layout.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "runtime/backend.h"
#include "runtime/memory_info.h"
#include "train/data_parallel.h"
#include "train/loop.h"
#include "train/model_array.h"
#include "train/options.h"
#include "train/prefetch.h"
#include "train/profiling.h"
#include "train/training_graph.h"

namespace campo {

// Of model 0 (an array's other models: the JSON line).
struct TrainResult {
  double test_accuracy = 0;
  double final_loss = 0;  // mean training loss over the last 50 steps
  double samples_per_sec = 0;
  double wall_seconds = 0;
  int64_t steps = 0;
  int64_t parameters = 0;
  std::vector<float> losses;           // every step's training loss, in order (this run only)
  std::optional<StepProfile> profile;  // --profile-out's (perf/profile_file.h writes it)
};

// Evaluates the model stored in a checkpoint on a data set's test split; returns the
// accuracy and prints a line and a JSON line to `log`.
struct EvalOptions : CommonOptions {
  EvalOptions() {
    model.clear();  // default: the model named in the checkpoint
    batch = 500;    // --seed: the synthetic data set's seed (as campo train's)
  }
  std::string checkpoint;
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  int64_t limit = 0;
  float mask_prob = 0.15f;  // text data sets: as the model was trained (and --seq-len)
};
double evaluate_checkpoint(const EvalOptions& o, std::ostream& log);

// Builds the training graph of `o.model` for its data set's image shape and returns it as
// text (format "text") or Graphviz DOT ("dot").
std::string dump_training_graph(const TrainOptions& o, const std::string& format);

// The data sets of a run (its options checked; --limit-train / --limit-test applied) and the
// model options they imply (channels, image size, classes).
struct TrainingData {
  std::shared_ptr<const Dataset> train, test;
  DatasetOptions options;
  ModelOptions model_options;
};
TrainingData open_training_data(const TrainOptions& o, std::ostream& log);

// campo train's options of a classifier or BERT run, beside validate's (train/options.h:
// check_training_options runs both, train() this and start_run validate): the data set fits
// the model, the evaluation batch, BERT's text options, the image options.
void check_classifier_training_options(const TrainOptions& o);

// Trains and evaluates one model or, with --array N, N models as one fused step (one
// checkpoint per model with --save: array_checkpoint_path); progress goes to `log`, the
// final JSON line too (one entry per model). SIGINT or SIGTERM
// during training or evaluation ends the run after the current step with Interrupted
// (train/interrupt.h), the checkpoint written first when --save was given. A cost-aware
// run's calibration comes from `calibration` (train/options.h; none: the profiling step
// times both precisions).
TrainResult train(const TrainOptions& o, std::ostream& log, bool log_is_terminal,
                  const CalibrationSource& calibration = {});

// The graphs of one model, or of a model array (train/model_array.h) of N models trained as
// one fused step: a training step and an evaluation pass over shared variables. One model
// is an array of one, whose graph is the single model's. Cost-aware without
// precision.costs profiles the training graph first (with_profiled_costs, train/profiling.h).
class TrainingSession final : public Session {
 public:
  // One model of seed `seed`, with the optimizer's momentum and weight decay.
  TrainingSession(const std::string& model, const ModelOptions& model_options,
                  const Shape& image_shape, int64_t batch, const OptimizerConfig& optimizer,
                  uint64_t seed, std::shared_ptr<Backend> backend,
                  const PrecisionConfig& precision = {},
                  ConvLayout conv_layout = ConvLayout::blocked);
  // h.size() models: `optimizer` gives what is shared (kind, nesterov, betas), `h` each
  // model's momentum, weight decay, dropout (replacing model_options.dropout) and seed (h.lr
  // is not used: steps take the rates). Model i starts from exactly the weights a single
  // session of its seed starts from.
  TrainingSession(const std::string& model, const ModelOptions& model_options,
                  const Shape& image_shape, int64_t batch, OptimizerConfig optimizer,
                  const ArrayHyperparameters& h, std::shared_ptr<Backend> backend,
                  const PrecisionConfig& precision = {},
                  ConvLayout conv_layout = ConvLayout::blocked,
                  const DataParallelRun& data_parallel = {});
  ~TrainingSession();
  // --data-parallel (train/data_parallel.h): the step averages the gradients over the ranks,
  // every rank starts from rank 0's weights (and from them again after restore()), the
  // losses a step returns and the accuracies are those of every rank's samples together.
  const DataParallelRun& data_parallel() const { return data_parallel_; }

  int size() const { return n_; }
  // One step: model i trains on batches[i] (N pointers, possibly all the same batch, each
  // of exactly `batch` samples) at lr[i]; returns each model's loss. With dynamic loss
  // scaling, a step whose gradients overflow skips its update (see scaler()). `next`, when
  // given, are the next step's batches: uploaded while this step runs (train/prefetch.h),
  // they must not change before that step.
  std::vector<float> train_step(const std::vector<const Batch*>& batches,
                                const std::vector<float>& lr,
                                const std::vector<const Batch*>& next = {});
  // One model's step: its loss.
  float train_step(const Batch& batch, float lr);
  // The step in two parts, for steps on the same inputs (bench): feed() the batches and the
  // rates, then run() the step as often as wanted (each one an update), reading nothing
  // but the loss scaler's overflow flag; run() starts uploading `next` once the step is
  // launched.
  void feed(const std::vector<const Batch*>& batches, const std::vector<float>& lr);
  void run(const std::vector<const Batch*>& next = {});

  // Each model's accuracy over a whole loader's epoch (every model sees the same batches);
  // one model's.
  std::vector<double> evaluate_models(DataLoader& loader) override;
  double evaluate(DataLoader& loader);

  // As run_training drives it (train/loop.h): each model's value is its loss.
  int models() const override { return n_; }
  std::vector<StepValue> step_values() const override { return {{"loss", "loss", "final_loss"}}; }
  std::vector<std::vector<float>> step_models(const std::vector<const Batch*>& batches,
                                              const std::vector<float>& lr,
                                              const std::vector<const Batch*>& next) override;
  // Model i alone as a single model's checkpoint (the single model's names and shapes, its
  // optimizer state, the training position: optimizer steps, the loss scaler, one model's
  // dropout RNG; an array's model also its index and hyperparameters): campo eval, campo
  // train --resume and torchvision read it as they read any checkpoint.
  void save_model(int i, const std::string& path, int64_t epoch, int64_t position_in_epoch,
                  const std::string& optimizer) override;
  const LossScaler* loss_scaler() const override { return &scaler_; }
  PrecisionSummary precision_summary() const override { return info_.summary; }
  // --data-parallel: each gradient bucket's bytes, in the order the step starts them.
  const std::vector<int64_t>& gradient_bucket_bytes() const { return info_.gradient_bucket_bytes; }
  const VariableStore& variables() const override { return vars_; }
  FlopCount step_flops() const override { return count_step_flops(train_graph_, info_.fetches()); }
  double predicted_step_ms() const override {
    return info_.cost_plan ? info_.cost_plan->predicted_ms : 0.0;
  }
  void set_profiling(bool on) override;
  const OpProfile& profile() const override { return profile_; }
  MemoryReport memory() const override;
  std::vector<const Executable*> step_executables() const override { return {train_exe_.get()}; }

  VariableStore& variables() override { return vars_; }
  std::vector<StepGraph> step_graphs() override;
  Batch random_batch(Rng& rng) const override;
  const LossScaler& scaler() const { return scaler_; }
  // One model's checkpoint: save_model(0, ...).
  void save(const std::string& path, int64_t epoch, int64_t position_in_epoch,
            const std::string& optimizer) {
    save_model(0, path, epoch, position_in_epoch, optimizer);
  }
  // --numerics: the step's kernels write into `recorder`, which is made to watch the step's
  // tensors (train/numerics_watch.h; one error line when it has none).
  void record_numerics(const std::shared_ptr<NumericsRecorder>& recorder);
  // Restores variables and position (one model); returns the checkpoint's metadata.
  struct Position {
    int64_t epoch = 0, position_in_epoch = 0;
    int64_t skipped_steps = 0;  // batches whose update the loss scaler skipped
  };
  Position restore(const std::string& path, const std::string& optimizer);
  // Model i's copy of a variable, with the single model's shape.
  Tensor read_model_variable(int i, const std::string& name) const;
  Graph& train_graph() { return train_graph_; }
  const Executable& train_executable() const { return *train_exe_; }
  int64_t step() const { return step_; }
  // Steps whose inputs were uploaded during the step before (train/prefetch.h).
  int64_t prefetched_steps() const { return prefetch_.landed(); }
  // A metadata field every checkpoint of the session carries (a text model's vocabulary).
  void set_checkpoint_extra(const std::string& key, std::string value) {
    checkpoint_extra_[key] = std::move(value);
  }
  // Parameters of one model.
  int64_t parameter_count() const { return vars_.count_elements(VariableKind::parameter) / n_; }

 private:
  // The step's images and labels as the placeholders take them (arrays: stacked by model).
  std::vector<std::pair<std::string, Tensor>> host_inputs(
      const std::vector<const Batch*>& batches) const;
  // Starts uploading `next`'s inputs (train/prefetch.h); nothing when empty.
  void upload_next(const std::vector<const Batch*>& next);

  std::string model_;
  ModelOptions model_options_;
  Shape image_shape_;
  int64_t batch_;
  int n_;
  ArrayHyperparameters hyper_;
  ConvLayout conv_layout_;
  VariableStore vars_;
  ArraySlices slices_;  // arrays: the per-model view of vars_
  Graph train_graph_;
  TrainingGraphInfo info_;
  LossScaler scaler_;
  std::unique_ptr<Executable> train_exe_;
  InputPrefetch prefetch_{vars_.backend()};
  std::unique_ptr<class Evaluator> evaluator_;
  int64_t step_ = 0;
  OpProfile profile_;
  std::map<std::string, std::string> checkpoint_extra_;
  DataParallelRun data_parallel_;
};

}  // namespace campo
