// The profiling step of the cost-aware policy: measured per-node costs on this machine.
// Two ways to get a node's low-precision time:
//  - with a calibration (amp/calibration.h): the f32 step is timed and the low times are
//    predicted by the calibration's per-op models (the method of DESIGN.md), but for the
//    nodes whose model the calibration's own held-out error says not to trust, which are
//    timed in low precision too (untrusted_nodes);
//  - without one: the step is also timed with every allow/infer/clear op in low precision.
// Also the timing helpers the calibration runner and the GAN session share.
#pragma once

#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amp/calibration.h"
#include "amp/cost_aware.h"
#include "graph/executor.h"
#include "train/training_graph.h"

namespace campo {

// What the placeholders of a timed graph hold. Placeholders named in `tensors` get a copy,
// those in `constants` one value everywhere; other integer placeholders are uniform in
// [0, int_range), other floating ones N(0, 1).
struct TimingInputs {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, float> constants;
  int64_t int_range = 2;
};
// A training step's: lr 0 (the weights do not move), loss_scale / inv_loss_scale 1,
// step 1, labels in [0, classes).
TimingInputs training_timing_inputs(int64_t classes);

// Compiles g over `vars` (fetching `fetches`; side-effecting nodes run regardless), fills
// its placeholders from `inputs` (seeded by `seed`), runs `warmup` untimed and `steps`
// timed steps and returns each node's fastest time in ms by node id (0 for nodes that did
// not run: leaves, dead code).
std::vector<double> measure_node_times(const Graph& g, VariableStore& vars,
                                       const std::vector<ValueId>& fetches,
                                       const TimingInputs& inputs, int warmup, int steps,
                                       uint64_t seed = 7);

// The nodes profiling runs in low precision: every allow/infer/clear op but the leaves.
std::vector<char> all_low_nodes(const Graph& g, const AmpLists& lists);

struct CastTiming {
  int64_t elements = 0;
  DType from = DType::f32, to = DType::f32;
  double ms = 0;
};
struct BothPrecisionTimes {
  std::vector<double> fp32_ms;    // by node id of the graph given
  std::vector<double> low_ms;     // same ids; = fp32_ms for nodes kept f32
  std::vector<char> low;          // the nodes timed in low precision
  std::vector<CastTiming> casts;  // the casts of the low-precision copy
};
// Times g (a graph without casts) as is and a copy with all_low_nodes in `low` precision
// and its casts inserted, both over the same `vars`, their steps interleaved (f32, low,
// f32, low, ...) so that load from elsewhere falls on both alike.
BothPrecisionTimes measure_both_precisions(const Graph& g, VariableStore& vars,
                                           const std::vector<ValueId>& fetches,
                                           const TimingInputs& inputs, const AmpLists& lists,
                                           DType low, int warmup, int steps, uint64_t seed = 7);
// The same with the nodes `low_nodes` marks in low precision (by node id of g).
BothPrecisionTimes measure_both_precisions(const Graph& g, VariableStore& vars,
                                           const std::vector<ValueId>& fetches,
                                           const TimingInputs& inputs,
                                           const std::vector<char>& low_nodes, DType low,
                                           int warmup, int steps, uint64_t seed = 7);

// The costs of any graph without casts (node ids as g's), measured on `vars` with
// `inputs`: with precision.calibration the f32 step is timed and the low times and the cast
// model come from predict_costs, except for the nodes the calibration does not trust
// (untrusted_nodes), which are timed in low precision in steps interleaved with the f32
// ones (CostTable::low_measured); without, both precisions are timed (interleaved) and the
// cast model C_I + r * n is fitted by least squares on the casts of the low-precision copy.
// `precision.profile_warmup` untimed and `profile_steps` timed steps, each node's fastest.
CostTable graph_costs(const Graph& g, VariableStore& vars, const std::vector<ValueId>& fetches,
                      const TimingInputs& inputs, const PrecisionConfig& precision);

// The costs of the training graph of `spec` (node ids as build_training_graph(spec) gives
// before casts): graph_costs on random inputs with separate variables (the model being
// trained is untouched), measured on `backend`, the one the model will train on.
CostTable profile_costs(const TrainingGraphSpec& spec, std::shared_ptr<Backend> backend);
// `spec` ready for build_training_graph: for cost-aware without costs, with
// precision.costs = profile_costs(spec, backend); else unchanged.
TrainingGraphSpec with_profiled_costs(TrainingGraphSpec spec, std::shared_ptr<Backend> backend);

// --profile and bench's breakdown: the time of timed steps per op kind and compute type.
// attach() hooks an executable's node timings (several executables, e.g. a GAN's two step
// graphs, add into one profile); by_op() gives the totals per kind (name -> ms, largest
// first, kinds that ran only), by_op_dtype() per (kind, dtype).
class OpProfile {
 public:
  void reset() { ms_.clear(); }
  // Times `exe`'s nodes (those of `graph`) into this profile, or stops timing them.
  void attach(Executable& exe, const Graph& graph, bool on);
  std::vector<std::pair<std::string, double>> by_op() const;
  const std::map<std::pair<OpKind, DType>, double>& by_op_dtype() const { return ms_; }
  double total_ms() const;

 private:
  std::map<std::pair<OpKind, DType>, double> ms_;
};

}  // namespace campo
