// What `campo plan` and `campo bench` share about a model run: its shapes and sizes, the
// precision options, --for's predicted costs and the calibration, and the training graph
// spec they make of it.
#pragma once

#include <memory>
#include <string>

#include "amp/calibration.h"
#include "amp/cost_aware.h"
#include "amp/policy.h"
#include "graph/layout.h"
#include "graph/optimizer.h"
#include "perf/predict.h"
#include "runtime/backend.h"
#include "train/options.h"
#include "train/training_graph.h"

namespace campo {

// Shapes and sizes of a model run, shared by plan and bench.
// Of the common options (train/options.h), `device` is, for plan, whose mixed-precision
// lists (and costs) the plan uses (planning runs nothing on it, so a CUDA plan needs no GPU)
// and, for bench, where the steps run; `cuda_graph` is bench's (whether each policy's step
// is captured once and replayed); bert: `seq_len` tokens per sequence (the input is
// [batch, seq_len] token ids).
struct ModelRunOptions : CommonOptions {
  ModelRunOptions() {
    image_size = 28;
    channels = 1;
  }
  int classes = 10;  // bert: the vocabulary size
  // bert: its size.
  std::string bert_config = "mini";
  // bench: --deterministic (Backend::set_deterministic), recorded in its JSON.
  bool deterministic = false;
  // --low-precision (the CLI's default: the device's, default_low_precision), --loss-scale,
  // --amp-lists, --amp-lists-file, --search, --no-fold-casts.
  PrecisionOptions mixed;
  // dcgan and bert: adam unless given (tools/cli.cc).
  OptimizerConfig::Kind optimizer = OptimizerConfig::Kind::sgd;
  // cost-aware only: use these costs instead of profiling (tests, --for's predicted costs).
  std::shared_ptr<const CostTable> costs;
  // --for DEVICE --profile FILE: cost-aware's costs predicted for DEVICE from a profile
  // (attach_predicted_costs fills `costs`), and the line that says so in plans and benches.
  PlanForOptions plan_for;
  std::string costs_note;
  // cost-aware only: the calibration (amp/calibration.h; the CLI resolves --calibration
  // once, perf/calibration_store.h); the profiling step then times the f32 step only and
  // predicts the low-precision times. Null: both are timed.
  std::shared_ptr<const Calibration> calibration;
  // bench: --conv-layout, blocked activations between convolutions or plain (graph/layout.h).
  ConvLayout conv_layout = ConvLayout::blocked;
  int array = 1;  // --array: models trained as one fused step (train/model_array.h)
};

// The numbers of a run (model, batch, image size, channels, classes, --array), one error line
// naming the option.
void check_model_run_numbers(const ModelRunOptions& o);
TrainingGraphSpec model_run_spec(const ModelRunOptions& o, Precision policy);
// --for's target device kind (cuda for a GPU of the table, else cpu).
Device plan_for_device(const PlanForOptions& f);
// --for: o.costs = the costs of the model's training graph (before casts) on the target,
// predicted from the profile (predict_cost_table); o.costs_note says so. Nothing without
// --for. One error line for a profile of another model, batch or input size, or for DCGAN.
void attach_predicted_costs(ModelRunOptions& o);
// The precision settings of a run (checks them), for graphs other than the classifier's.
PrecisionConfig model_run_precision(const ModelRunOptions& o, Precision policy);

}  // namespace campo
