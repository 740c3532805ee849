// The interface every kind of training session implements (a classifier or BERT's masked
// LM, alone or as a model array: TrainingSession, train/trainer.h; DCGAN, alone or arrayed:
// GanSession, train/gan_trainer.h): what the one training loop (train/loop.h) drives and
// `campo bench` times (perf/bench.h). A single model is an array of one: every vector below
// holds one entry per model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/cost_aware.h"
#include "datasets/dataset.h"
#include "graph/flops.h"
#include "graph/memory_report.h"
#include "runtime/rng.h"
#include "train/data_parallel.h"
#include "train/model_array.h"
#include "train/profiling.h"
#include "train/training_graph.h"

namespace campo {

class DataLoader;
class Executable;

// A value a session's step reports per model.
struct StepValue {
  std::string name;    // --metrics and TensorBoard: "loss" is the loss, others by name
  std::string label;   // on the progress line; "" prints it after the previous one, "a/b"
  std::string result;  // its field in the JSON result (the mean of the last 50 steps)
};

// One graph of a session's training step, as campo plan shows it and campo calibrate times
// it alone.
struct StepGraph {
  std::string name;  // "training step"; DCGAN's "discriminator step" and "generator step"
  std::string tag;   // its short name in labels: ""; DCGAN's "D step" and "G step"
  Graph* graph = nullptr;
  std::vector<ValueId> fetches;
  // cost-aware: the costs its plan was decided from, and the plan (null otherwise).
  std::shared_ptr<const CostTable> costs;
  std::shared_ptr<const CostAwarePlan> plan;
  std::shared_ptr<const CostTable> f16_costs;  // --low-precision auto: f32 and f16 times
  TimingInputs timing_inputs;  // what its placeholders take when it is timed alone
};

// What run_training needs of a session, and bench times (see the file comment).
class Session {
 public:
  virtual ~Session() = default;
  virtual int models() const = 0;
  virtual std::vector<StepValue> step_values() const = 0;
  // One step: model i trains on batches[i] at lr[i]; per model its step_values(), in order.
  // `next` (empty: none) are the next step's batches, which the session may upload while
  // this step runs (train/prefetch.h) and which must not change before that step.
  virtual std::vector<std::vector<float>> step_models(const std::vector<const Batch*>& batches,
                                                      const std::vector<float>& lr,
                                                      const std::vector<const Batch*>& next) = 0;
  // Each model's accuracy over the loader's epoch.
  virtual std::vector<double> evaluate_models(DataLoader& loader) = 0;
  // Model i alone, at a training position, as a checkpoint campo eval and --resume read.
  virtual void save_model(int i, const std::string& path, int64_t epoch, int64_t position_in_epoch,
                          const std::string& optimizer) = 0;
  // The dynamic loss scaler; null without one.
  virtual const LossScaler* loss_scaler() const = 0;
  virtual PrecisionSummary precision_summary() const = 0;
  // Every model's variables (parameters, buffers, optimizer state), on the run's backend.
  virtual const VariableStore& variables() const = 0;
  virtual VariableStore& variables() = 0;
  // The graphs of one step, in the order a step runs them.
  virtual std::vector<StepGraph> step_graphs() = 0;
  // A batch of `batch` random samples the step takes (bench steps on one, the same each
  // step): images (or token ids) and, where the model learns from them, labels.
  virtual Batch random_batch(Rng& rng) const = 0;
  // The FLOPs of one step (graph/flops.h; every model's, every step graph's).
  virtual FlopCount step_flops() const = 0;
  // cost-aware: the plan's predicted time of one step in ms; 0 for the other policies.
  virtual double predicted_step_ms() const = 0;
  // Times every node of the steps that follow into profile() (cleared when turned on), or
  // stops timing them (the profile stays).
  virtual void set_profiling(bool on) = 0;
  virtual const OpProfile& profile() const = 0;
  // Where the session's memory goes (graph/memory_report.h).
  virtual MemoryReport memory() const = 0;
  // The executables of its training step (--cuda-graph reports whether they were replayed).
  virtual std::vector<const Executable*> step_executables() const = 0;
};

// A resolved model description: what make_session (train/make_session.h) builds a session of.
struct SessionSpec {
  // The model, its options and input shape (images [C, H, W]: a GAN's generator makes
  // those), the batch, the optimizer (DCGAN: Adam, whose beta1 its session sets), the
  // precision plan or calibration, and --array's model count.
  TrainingGraphSpec graph;
  ArrayHyperparameters models;    // one entry per model (graph.array of them)
  ConvLayout conv_layout = ConvLayout::blocked;
  DataParallelRun data_parallel;  // classifiers and BERT: --data-parallel's ranks
  int nz = 100, ngf = 64, ndf = 64;  // a GAN's widths (TrainOptions')
  int64_t gan_samples = 64;          // a GAN's sample grid: images per grid
  // cost-aware with several step graphs (a GAN's): each one's costs, in step order, instead
  // of its profiling step (the measured guard's, train/policy_guard.h). Empty: profiled.
  // One step graph takes its costs in graph.precision.costs.
  std::vector<std::shared_ptr<const CostTable>> step_costs;
};
// Whether a session's steps were captured once and replayed (CUDA graphs,
// Executable::replay_blocker): {"captures", "replays", "launched_because": why they were
// launched kernel by kernel, or null}; the line `campo train` and `campo bench` print on a
// device that can capture: "cuda graph: replayed (1 capture, 99 replays)" or "cuda graph:
// kernel by kernel (<why>)".
nlohmann::json cuda_graph_json(const Session& session);
std::string cuda_graph_line(const Session& session);

}  // namespace campo
