// The training graph of a classifier (forward, loss, backward, optimizer) and the precision
// policy every training graph goes through: apply_policy is the one place where fp32, amp
// and cost-aware (with its casts and padding) are applied, for the classifier session
// (train/trainer.h) and both step graphs of the GAN session (train/gan_trainer.h).
//
// Nothing here measures: cost-aware needs its costs given (profiling.h's
// with_profiled_costs measures them), so that this file depends on no session and no
// profiling step.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "graph/graph.h"
#include "graph/optimizer.h"
#include "graph/variables.h"
#include "models/models.h"

namespace campo {

// The options that shape a mixed-precision policy, as the command line gives them; train,
// plan and bench take the same struct.
struct PrecisionOptions {
  std::string low_precision = "bf16";  // bf16 | fp16: the low type of amp / cost-aware
  std::string loss_scale = "auto";     // auto (dynamic for fp16, none for bf16) | dynamic | none
  float loss_scale_init = 65536.0f;
  int loss_scale_growth_interval = 2000;
  std::string amp_lists_edit;    // e.g. "allow+=Tanh;clear-=Relu"
  std::string amp_lists_file;    // JSON edits
  std::string precision_policy_file;  // --precision-policy: JSON rules (amp/precision_policy.h)
  std::string search = "exact";  // cost-aware: exact or traversals
  bool fold_casts = true;        // cost-aware: fold weight-gradient casts into producers
  bool allow_fp8 = false;        // cost-aware: GEMMs may run on FP8 operands where that pays
};
// The policy's configuration on `device` (its mixed-precision lists); checks each option
// (one error line naming it) and reads --amp-lists-file and --precision-policy (for amp and
// cost-aware: an fp32 run, as bench's baseline beside the others, reads no rules; the CLI
// refuses --precision-policy where every policy is fp32). Cost-aware with one low type refuses
// a rule that sets the other one (its search chooses between f32 and that type); a rule
// that sets f16 turns --loss-scale auto's dynamic scaling on. Leaves costs and calibration out.
PrecisionConfig precision_config(Precision policy, const PrecisionOptions& o, Device device);

// amp's types per node of g: the lists' painting (paint_amp) in precision.low, then each
// node `rules` set (may be null) in its rule's format.
std::vector<DType> amp_dtypes(const Graph& g, const PrecisionConfig& precision,
                              const PolicyAssignment* rules);

// --low-precision auto: one table of f32, f16 and bf16 times per node from the profiling
// step's two (each node's f32 time the faster of the two measured), and the exact three-way
// plan (amp/three_way.h) as a CostAwarePlan whose `dtype` says each node's type.
ThreeWayCostTable three_way_costs(const CostTable& bf16, const CostTable& f16);
// The plan is the fastest predicted of the mixed search's and the exact plans of each low
// type alone (which it reports, for campo plan).
struct AutoChoice {
  double bf16_only_ms = 0, f16_only_ms = 0;
  const char* chosen = "mixed";  // "mixed", "bf16 only" or "f16 only"
};
struct AutoPlan {
  CostAwarePlan plan;
  AutoChoice choice;
};
// `rules` (may be null): the nodes a precision policy file sets keep their type.
AutoPlan plan_automatic(const Graph& g, const PrecisionConfig& precision,
                        const CostTable& bf16_costs, const PolicyAssignment* rules = nullptr);

// What apply_policy did to a graph.
struct PolicyResult {
  // cost-aware only: the decisions, by node id of the graph before cast insertion (which
  // keeps its ids).
  std::shared_ptr<const CostAwarePlan> cost_plan;
  // cost-aware: low-precision GEMMs and convolutions with unaligned dimensions, padded ones,
  // and the alignment (the backend's Backend::padding_alignment).
  int padding_candidates = 0, padded = 0, pad_to = 0;
  AutoChoice auto_choice;  // --low-precision auto: the one-type plans beside
  // --precision-policy: which rule set each node (by node id before cast insertion); null
  // without rules.
  std::shared_ptr<const PolicyAssignment> rules;
};

// Whether padding node `id` of g (a padding candidate, amp/padding.h) pays.
using PaddingDecision = std::function<bool(const Graph& g, NodeId id)>;

class Communicator;

// Applies precision.policy to g, a training graph without casts:
//   fp32        nothing (with precision.rules: the nodes they set, the rest f32);
//   amp         TensorFlow's painting of precision.lists (apply_amp_policy), the nodes
//               precision.rules set in their rules' formats instead (amp_dtypes);
//   cost-aware  plan_cost_aware with `costs` (by node id of g; required), the casts
//               (apply_precision), then, with precision.padding, sets pad_to (`backend`'s
//               padding_alignment) on the low-precision GEMMs and convolutions `pays`
//               says gain from it (default: padding_pays, a side-by-side timing of each
//               candidate on `backend`, the one the graph will run on); the nodes
//               precision.rules set are pinned (CostAwareOptions::pins; auto: their type
//               is the only one allowed them).
// With `agree` (a data-parallel run of several ranks, whose measured costs and timings
// differ), every rank takes rank 0's cost-aware plan and padding decisions, so that all
// ranks run the same graph.
PolicyResult apply_policy(Graph& g, const PrecisionConfig& precision, const CostTable* costs,
                          std::shared_ptr<Backend> backend, const PaddingDecision& pays = nullptr,
                          Communicator* agree = nullptr);

// The name of a model's input placeholder: "images" [batch, C, H, W] f32, or "input_ids"
// [batch, T] i32 for a model of token inputs (models.h's ModelInput).
const char* input_placeholder(const std::string& model);

// What one training step computes: model forward on the input placeholder and "labels"
// ([batch] i32; [batch, T] for token models), the mean softmax cross-entropy (token
// models: the sum over the labels that are not kIgnoreLabel times the placeholder
// "inv_num_targets", 1 / their number, fed per batch), gradients seeded by the
// placeholder "loss_scale", unscaling and the AllFinite check when loss scaling is on,
// the optimizer updates, then the precision policy (apply_policy; cost-aware uses
// precision.costs, which must be set: see with_profiled_costs in train/profiling.h).
struct TrainingGraphSpec {
  std::string model;
  ModelOptions model_options;
  Shape image_shape;  // [C, H, W]; [T] for token models
  int64_t batch = 0;
  OptimizerConfig optimizer;
  PrecisionConfig precision;
  // A model array (train/model_array.h) of `array` image models: "images" is
  // [batch, array * C, H, W] (model i's images in channel block i), "labels" [batch * array]
  // (row b * array + i: model i's label of sample b), the loss the sum of the models' mean
  // losses (so each model's gradient is its own), `model_losses` [array] each model's, and
  // optimizer.slices must equal `array`.
  int array = 1;
  // --data-parallel over `ranks` processes (0: not data-parallel): the gradients, in the
  // order the backward pass produces them, are packed into buckets of about bucket_bytes,
  // each summed over the ranks by AllReduceStart / AllReduceWait (ops/op.h) and divided by
  // `ranks`, before the unscaling, the AllFinite check (so an overflow on any rank skips
  // the step on every rank) and the updates. `agree`: the ranks' communicator, through
  // which rank 0's precision decisions are everyone's (apply_policy).
  struct DataParallel {
    int ranks = 0;
    int64_t bucket_bytes = int64_t(25) << 20;
    Communicator* agree = nullptr;
  } data_parallel;
};
struct TrainingGraphInfo {
  ValueId loss = kNoValue;
  ValueId all_finite = kNoValue;
  ValueId model_losses = kNoValue;  // model arrays: [array], each model's mean loss
  // What a training step fetches: the loss, each model's loss in an array, and the
  // gradients' finiteness check when there is one (the live nodes are those these and the
  // updates need).
  std::vector<ValueId> fetches() const {
    std::vector<ValueId> f = {loss};
    if (model_losses != kNoValue) f.push_back(model_losses);
    if (all_finite != kNoValue) f.push_back(all_finite);
    return f;
  }
  PrecisionSummary summary;
  // cost-aware only: the costs used and the decisions (by node id of the graph before
  // cast insertion, which keeps its ids).
  std::shared_ptr<const CostTable> costs;
  std::shared_ptr<const CostTable> f16_costs;  // --low-precision auto: f32 and f16 times
  std::shared_ptr<const CostAwarePlan> cost_plan;
  int padding_candidates = 0, padded = 0, pad_to = 0;  // as PolicyResult's
  AutoChoice auto_choice;                               // as PolicyResult's
  std::shared_ptr<const PolicyAssignment> rules;        // as PolicyResult's
  std::vector<int64_t> gradient_bucket_bytes;  // data-parallel: per AllReduceStart, in order
};
TrainingGraphInfo build_training_graph(Graph& g, VariableStore& vars,
                                       const TrainingGraphSpec& spec);

// --precision-policy checked against the model before any work (a calibration, the profiling
// step, a step) is spent: spec's training graph is built (on the host, nothing runs) and the
// rules resolved on it (resolve_precision_policy's error lines: a glob or rule that selects
// nothing, layers beyond the model's), and every node a rule puts in low precision must have a
// kernel in that type on `device` (the CPU emulates any; a GPU build registers its own).
// Nothing without rules. Returns a line for the run's log where the device runs quantized
// GEMMs two ways (cuda: how many as cuBLASLt FP8 GEMMs, how many emulated,
// ops/quantized_gemm_route.h); empty otherwise.
std::string check_precision_policy(const TrainingGraphSpec& spec, Device device);

}  // namespace campo
