// The training driver behind `campo train`: builds the one-step training graph (forward,
// loss, backward, optimizer) and the evaluation graph over one VariableStore, runs epochs
// with a progress display, evaluates on the test split and reports metrics.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "datasets/dataset.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
#include "models/models.h"

namespace campo {

struct TrainOptions {
  std::string model = "lenet";
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  int epochs = 1;
  int64_t max_steps = 0;  // 0: full epochs; else stop after this many steps
  int64_t batch = 64;
  int64_t eval_batch = 500;
  float lr = 0.05f;
  std::string lr_schedule = "cosine";  // constant | step | cosine (decay to 0 over the run)
  int lr_step_epochs = 30;                // step: multiply by lr_gamma every N epochs
  float lr_gamma = 0.1f;
  int64_t warmup_steps = 0;  // linear warm-up from 0 over the first N steps
  std::string optimizer = "sgd";  // sgd | adam
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  float dropout = 0.0f;
  uint64_t seed = 42;
  int64_t train_limit = 0;  // use only the first N training samples (0: all)
  int64_t test_limit = 0;   // evaluate on the first N test samples (0: all)
  std::string progress = "auto";  // auto | bar | lines | none
  int threads = 0;                // 0: OpenMP default
  bool profile = false;           // time every node; print the time per op at the end
};

struct TrainResult {
  double test_accuracy = 0;
  double final_loss = 0;  // mean training loss over the last 50 steps
  double samples_per_sec = 0;
  double wall_seconds = 0;
  int64_t steps = 0;
  int64_t parameters = 0;
};

// Builds the training graph of `o.model` for its data set's image shape and returns it as
// text (format "text") or Graphviz DOT ("dot").
std::string dump_training_graph(const TrainOptions& o, const std::string& format);

// The learning rate at (0-based) `step` of `total_steps`, `steps_per_epoch` per epoch.
float learning_rate_at(const TrainOptions& o, int64_t step, int64_t total_steps,
                       int64_t steps_per_epoch);

// Checks the options (one clear campo::Error per problem) before anything is loaded.
void validate(const TrainOptions& o);

// Trains and evaluates; progress goes to `log`, the final JSON line too.
TrainResult train(const TrainOptions& o, std::ostream& log, bool log_is_terminal);

// The graphs of one model: a training step and an evaluation pass over shared variables.
class TrainingSession {
 public:
  TrainingSession(const std::string& model, const ModelOptions& model_options,
                  const Shape& image_shape, int64_t batch, const OptimizerConfig& optimizer,
                  uint64_t seed);
  ~TrainingSession();

  // One step on a batch of exactly `batch` samples; returns the loss.
  float train_step(const Batch& batch, float lr);
  // Accuracy (fraction correct) over a whole loader's epoch.
  double evaluate(class DataLoader& loader);

  // Per-node timing of training steps, summed per op kind (name -> total ms).
  void set_profiling(bool on);
  std::vector<std::pair<std::string, double>> profile_by_op() const;

  VariableStore& variables() { return vars_; }
  Graph& train_graph() { return train_graph_; }
  int64_t step() const { return step_; }
  int64_t parameter_count() const { return vars_.count_elements(VariableKind::parameter); }

 private:
  struct EvalGraph;
  EvalGraph& eval_graph(int64_t batch);

  std::string model_;
  ModelOptions model_options_;
  Shape image_shape_;
  int64_t batch_;
  uint64_t seed_;
  VariableStore vars_;
  Graph train_graph_;
  ValueId loss_ = kNoValue;
  std::unique_ptr<Executable> train_exe_;
  std::vector<std::unique_ptr<EvalGraph>> eval_graphs_;
  int64_t step_ = 0;
  std::vector<double> op_ms_;  // by OpKind
};

}  // namespace campo
