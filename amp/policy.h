// Precision policies: which nodes of the training graph run in low precision, then cast
// insertion. `fp32` leaves the graph alone; `amp` is TensorFlow's list-based
// auto-mixed-precision rewrite; `cost-aware` (Campo) comes with its cost models.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amp/cost_aware.h"
#include "amp/lists.h"
#include "amp/loss_scaler.h"
#include "amp/precision_policy.h"
#include "amp/three_way.h"
#include "graph/graph.h"

namespace campo {

enum class Precision : uint8_t { fp32, amp, cost_aware };
Precision parse_precision(const std::string& s);  // "fp32", "amp", "cost-aware"
const char* precision_name(Precision p);
// The low-precision type of a device when --low-precision is not given: bf16 on the CPU
// (native with AVX-512 BF16, and no loss scaling needed), f16 on CUDA (TensorFlow's CUDA
// rewrite is f16-only; tensor cores run f16 on every GPU that has them, bf16 only from
// Ampere on).
DType default_low_precision(Device device);

// How a training graph is made mixed precision.
struct PrecisionConfig {
  Precision policy = Precision::fp32;
  DType low = DType::bf16;
  LossScalerOptions scaler{.enabled = false};
  // The lists of the run's device and low type (precision_config sets them, then applies
  // --amp-lists-file and --amp-lists); by default the CPU's bf16 lists.
  AmpLists lists = AmpLists::defaults(Device::cpu, DType::bf16);
  // --precision-policy: rules that set the format of the nodes they select, over the lists'
  // choice (amp) or as constraints of the search (cost-aware); null: none. With fp32 they are
  // the only low-precision nodes (the guard's fp32 plan beside a cost-aware run's).
  std::shared_ptr<const PrecisionPolicy> rules;
  // cost-aware: the measured or predicted costs; when null, the profiling step measures
  // them on the training graph itself (train/profiling.h).
  std::shared_ptr<const CostTable> costs;
  std::shared_ptr<const struct Calibration> calibration;  // set: profiling times f32 only
  int profile_warmup = 2, profile_steps = 3;
  // cost-aware: pad low-precision GEMMs with unaligned K/N where a side-by-side timing of
  // the node says it pays (amp/padding.h).
  bool padding = true;
  // cost-aware: fold the casts of weight gradients into their producers and those of
  // weights into the optimizer updates (apply_precision). amp, as TensorFlow's rewrite,
  // inserts them as Cast nodes.
  bool fold_casts = true;
  // cost-aware: the four traversals alone, or followed by the exact search (amp/cost_aware.h).
  CostAwareSearch search = CostAwareSearch::exact;
  // --low-precision: one low type (`low`), or `automatic`: cost-aware chooses per node among
  // f32, f16 and bf16 (amp/three_way.h). Then `low` and `lists` are bf16's, `costs` bf16's
  // (f32 and bf16 times), and these f16's; amp paints `low`.
  // cost-aware over one low type: a GEMM may also run on FP8 operands (the "fp8" format,
  // delayed scaling) where its costs' fp8_ms says that is its cheapest f32 form.
  bool allow_fp8 = false;
  LowPrecisionMode low_mode = LowPrecisionMode::bf16;
  AmpLists f16_lists = AmpLists::defaults(Device::cpu, DType::f16);
  std::shared_ptr<const CostTable> f16_costs;
  bool automatic() const { return low_mode == LowPrecisionMode::automatic; }
};

// TensorFlow's painting passes over the whole training graph (forward, backward and
// update nodes), in order:
//  1. allow-list ops are painted low precision;
//  2. deny propagates forward from deny ops through infer ops and through clear ops that
//     lead into deny/infer ops;
//  3. clear/infer ops that are both downstream and upstream of allow ops (between two
//     allow ops, through clear/infer ops only) are painted;
//  4. low precision propagates from painted ops through connected clear ops (both
//     directions) that are not deny-painted.
// Returns, per node id, whether it runs in low precision.
std::vector<char> paint_amp(const Graph& g, const AmpLists& lists);

struct CastStats {
  int casts = 0;               // Cast nodes inserted
  int64_t cast_elements = 0;   // elements converted per step by those casts
  int folded = 0;              // casts folded away instead: into their producers
                               // (Node::f32_output) or into optimizer updates (weight copies)
  int weight_copies = 0;       // of which weight copies (Node::weight_copy)
};

// Sets node.dtype = low for every painted node, then inserts casts: every floating input
// of a node gets the node's dtype (f32 for the schema's fp32_inputs), through one Cast per
// (producer output, target dtype) shared by all consumers that need it. Re-infers output
// dtypes in topological order.
// With `fold_casts`, a low-precision node whose schema can_write_f32_output and whose output
// 0 is read only in f32 writes it in f32 itself (Node::f32_output) instead of through a
// Cast: weight gradients (Conv2DBackpropFilter) for the f32 optimizer updates. And a
// low-precision Cast of a weight the graph's optimizer updates becomes a weight copy
// (Node::weight_copy): the update rewrites it, so no Cast runs per step.
CastStats apply_precision(Graph& g, const std::vector<char>& low, DType low_type,
                          bool fold_casts = false);
// The same with a type per node (by NodeId: f32, f16 or bf16; --low-precision auto). A value
// made in one low type and read in the other goes through f32 (one Cast to f32, shared with
// the value's f32 readers, then one to the other type), as amp/three_way.h prices it.
CastStats apply_precision(Graph& g, const std::vector<DType>& dtype, bool fold_casts = false);

// Inserts the casts the current node dtypes need (apply_precision's second half); on a
// graph that has its casts it adds only the missing ones (a variable retyped since, e.g. bf16
// weights without master copies: graph/optimizer.h). An optimizer update reads the variables
// it rewrites in place (var, state) as stored and its weight copies as they are: never cast.
CastStats insert_casts(Graph& g);

// Turns every f32 -> low Cast of a variable that the graph's optimizer updates into a
// weight copy (Node::weight_copy) the update writes (apply_precision's last step with
// `fold_casts`). Returns weight_copies and their cast_elements. An update writes one copy:
// a weight read in both f16 and bf16 (--low-precision auto) keeps its second Cast.
CastStats fold_weight_casts(Graph& g);

struct PrecisionSummary {
  int low_nodes = 0, f32_nodes = 0;  // nodes with kernels (no leaves, no casts)
  int f16_nodes = 0;                 // of the low nodes, those in f16 (the rest are bf16)
  CastStats casts;
  // cost-aware with a calibration: whether the profiling step found it fits (CostTable's).
  CalibrationFit calibration;
};
// The `amp` policy: paint_amp + apply_precision.
PrecisionSummary apply_amp_policy(Graph& g, const AmpLists& lists, DType low_type);
// With `fetches`: only the nodes a step fetching them runs (live_nodes) count, so that
// casts feeding dead code (never run) are not counted.
PrecisionSummary summarize_precision(const Graph& g, const std::vector<ValueId>& fetches = {});

}  // namespace campo
