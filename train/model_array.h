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
//
// The sessions: TrainingSession (train/trainer.h) of N models for the classifiers, GanSession
// (train/gan_trainer.h) for DCGAN; this file holds what they share.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/checkpoint.h"
#include "graph/optimizer.h"
#include "graph/variables.h"
#include "train/loop_options.h"

namespace campo {

// Whether `model` can be built as a model array (image models whose layers all act per
// channel or through the layer helpers); a one-line reason when not.
bool supports_model_array(const std::string& model, std::string* why = nullptr);

// Each model's hyperparameters (all of size N).
struct ArrayHyperparameters {
  std::vector<float> lr, momentum, weight_decay, dropout;
  std::vector<uint64_t> seed;
  int size() const { return int(seed.size()); }
  // At least one model, every list of size() values.
  void check() const;
  // Model i's values as JSON: lr, momentum, weight_decay, dropout, seed.
  nlohmann::ordered_json of_model(int i) const;
};
// One model's: the optimizer's momentum and weight decay, `seed`, `dropout` (lr 0).
ArrayHyperparameters one_model(const OptimizerConfig& optimizer, uint64_t seed,
                               float dropout = 0.0f);
// Model i's optimizer alone: the shared settings with its momentum and weight decay.
OptimizerConfig model_optimizer(OptimizerConfig o, const ArrayHyperparameters& h, int i);
// The optimizer of the whole array: one model's (model_optimizer(o, h, 0)) or, for N >= 2,
// N slices, each with its model's momentum (sgd) and weight decay.
OptimizerConfig array_optimizer(OptimizerConfig o, const ArrayHyperparameters& h);

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
  // Model i alone as a single model's checkpoint (graph/checkpoint.h) at `path`: `meta` with
  // its index, the array's size and its hyperparameters `h` (as JSON) added.
  void save_model(const std::string& path, const VariableStore& array, int i,
                  const ArrayHyperparameters& h, CheckpointMeta meta) const;

 private:
  int n_;
  std::map<std::string, Shape> shapes_;
  std::map<std::string, std::vector<Tensor>> starts_;  // name -> each model's values
};

// Model i's samples (xs[i], `rows` samples each, f32) stacked into channel block i of a
// [rows, N C, ...] tensor: the input of a model array. One model's input is its own tensor
// (of any dtype: a token model's ids too), not a copy.
Tensor stack_model_inputs(const std::vector<const Tensor*>& xs, int64_t rows);

// Model i's checkpoint path of an array saved to `path`: "run.safetensors" -> "run-2.safetensors".
std::string array_checkpoint_path(const std::string& path, int i);

}  // namespace campo
