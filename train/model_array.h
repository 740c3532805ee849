// Model arrays (horizontal fusion, after HFTA, Wang et al., MLSys 2021): N copies of one
// model that differ only in hyperparameters (learning rate, momentum, weight decay, seed,
// dropout) trained as ONE fused step. The graph is built once for the array
// (graph/builder.h's array size): activations stack the models along axis 1, convolutions
// become grouped convolutions over N x C channels, linear layers batched matrix products,
// batch norm is per channel and so per model, and the loss is the sum of the models' mean
// losses, so each model's gradient is its own. Every persistent variable holds the N models'
// copies as N contiguous equal slices (model i: elements [i numel / N, (i + 1) numel / N)),
// and one optimizer update per variable applies each slice's hyperparameters.
//
// Model i of an array starts from exactly the weights a single run with its seed starts
// from (each slice is initialised by building the single model on a store of that seed) and,
// in fp32, trains as that run would up to the summation order of the fused kernels.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/policy.h"
#include "datasets/dataset.h"
#include "graph/executor.h"
#include "graph/layout.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "train/loop.h"
#include "train/profiling.h"
#include "train/training_graph.h"

namespace campo {

class DataLoader;
struct TrainOptions;

// Whether `model` can be built as a model array (image models whose layers all act per
// channel or through the layer helpers); a one-line reason when not.
bool supports_model_array(const std::string& model, std::string* why = nullptr);

// Each model's hyperparameters (all of size N).
struct ArrayHyperparameters {
  std::vector<float> lr, momentum, weight_decay, dropout;
  std::vector<uint64_t> seed;
  int size() const { return int(seed.size()); }
};

// The hyperparameters of `--array N` (at least one model): each list of N values, or the
// scalar option's value (`single`'s) for every model. Checks the sizes.
ArrayHyperparameters array_hyperparameters(const ArrayOptions& a,
                                           const ArrayHyperparameters& single);

// A model array's variables seen per model: each variable's single-model shape, the starting
// values written into the slices from the single models' stores, model i's slice read out,
// and model i alone as a single model's store (for its checkpoint). Shared by the
// classifier and the DCGAN arrays.
class ArraySlices {
 public:
  explicit ArraySlices(int models) : n_(models) {}
  // Records the starting values of the next model (model 0 first) from a store built for
  // the single model of its seed.
  void add_model(const VariableStore& single);
  // Writes every recorded model into its slice of `array`, after checking that the models
  // cover exactly its variables, each N times a single model's size; forgets the values.
  void write_into(VariableStore& array);
  // Model i's copy of `name`, with the single model's shape.
  Tensor read(const VariableStore& array, int i, const std::string& name) const;
  // Model i alone: a store of the single model's names, shapes and kinds with its values, on
  // the array's backend.
  VariableStore single_store(const VariableStore& array, int i, uint64_t seed) const;

 private:
  int n_;
  std::map<std::string, Shape> shapes_;
  std::map<std::string, std::vector<Tensor>> starts_;  // name -> each model's values
};

// Model i's samples (xs[i], `rows` samples each, f32) stacked into channel block i of a
// [rows, N C, ...] tensor: the input of a model array.
Tensor stack_model_inputs(const std::vector<const Tensor*>& xs, int64_t rows);

class ModelArraySession final : public Session {
 public:
  // `optimizer` gives what is shared (kind, nesterov, betas); the per-model momentum and
  // weight decay come from `h`; model_options.dropout is replaced by h.dropout per model.
  ModelArraySession(const std::string& model, const ModelOptions& model_options,
                    const Shape& image_shape, int64_t batch, OptimizerConfig optimizer,
                    const ArrayHyperparameters& h, std::shared_ptr<Backend> backend,
                    const PrecisionConfig& precision = {},
                    ConvLayout conv_layout = ConvLayout::blocked);
  ~ModelArraySession();

  int size() const { return n_; }
  // One fused step: model i trains on batches[i] (N pointers, possibly all the same batch,
  // each of exactly `batch` samples) at learning rate lr[i]; returns each model's loss.
  std::vector<float> train_step(const std::vector<const Batch*>& batches,
                                const std::vector<float>& lr);
  // Each model's accuracy over a whole loader's epoch (every model sees the same batches).
  std::vector<double> evaluate(DataLoader& loader);

  // Model i's copy of a variable, with the single model's shape (parameters, buffers and
  // optimizer state).
  Tensor read_model_variable(int i, const std::string& name) const;
  // Writes model i alone as a single model's checkpoint (the single model's names and
  // shapes, with its optimizer state): campo eval, campo train --resume and torchvision
  // read it as they read any checkpoint.
  void save_model(int i, const std::string& path, int64_t epoch, int64_t position_in_epoch,
                  const std::string& optimizer) override;

  // Parameters of one model.
  int64_t parameter_count() const;
  VariableStore& variables() { return vars_; }
  Graph& train_graph() { return train_graph_; }
  const Executable& train_executable() const { return *train_exe_; }
  PrecisionSummary precision_summary() const override { return summary_; }
  const LossScaler& scaler() const { return scaler_; }
  int64_t step() const { return step_; }
  // Per-node timing of training steps, summed per op kind (name -> total ms).
  void set_profiling(bool on) override;
  std::vector<std::pair<std::string, double>> profile_by_op() const override;

  // As run_training drives it (train/loop.h): each model's value is its loss.
  int models() const override { return n_; }
  std::vector<StepValue> step_values() const override { return {{"loss", "loss", "final_loss"}}; }
  std::vector<std::vector<float>> step_models(const std::vector<const Batch*>& batches,
                                              const std::vector<float>& lr) override;
  std::vector<double> evaluate_models(DataLoader& loader) override { return evaluate(loader); }
  const LossScaler* loss_scaler() const override { return &scaler_; }

 private:
  struct EvalGraph;
  EvalGraph& eval_graph(int64_t batch);

  std::string model_;
  ModelOptions model_options_;
  Shape image_shape_;
  int64_t batch_;
  int n_;
  ArrayHyperparameters hyper_;
  ConvLayout conv_layout_;
  VariableStore vars_;
  ArraySlices slices_;
  Graph train_graph_;
  ValueId loss_ = kNoValue, model_losses_ = kNoValue, all_finite_ = kNoValue;
  LossScaler scaler_;
  PrecisionSummary summary_;
  std::unique_ptr<Executable> train_exe_;
  std::vector<std::unique_ptr<EvalGraph>> eval_graphs_;
  int64_t step_ = 0;
  OpProfile profile_;
};

// `campo train --array N`: trains the array on the options' data set, evaluates each model,
// writes one checkpoint per model with --save (PATH's stem + "-<i>" + its extension) and
// prints a result JSON line with one entry per model.
struct ArrayTrainResult {
  std::vector<double> test_accuracy, final_loss;  // per model
  std::vector<std::vector<float>> losses;         // per model, every step's loss
  std::vector<std::string> checkpoints;           // per model, with --save
  double samples_per_sec = 0;                     // over all models
  int64_t steps = 0;
};
ArrayTrainResult train_array(const TrainOptions& o, std::ostream& log, bool log_is_terminal);

// Model i's checkpoint path of an array saved to `path`: "run.safetensors" -> "run-2.safetensors".
std::string array_checkpoint_path(const std::string& path, int i);

}  // namespace campo
