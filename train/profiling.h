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
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "amp/calibration.h"
#include "amp/cost_aware.h"
#include "graph/executor.h"
#include "runtime/hardware_counters.h"
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
// not run: leaves, dead code). `steps_ms` (when given) gets each timed step's total.
std::vector<double> measure_node_times(const Graph& g, VariableStore& vars,
                                       const std::vector<ValueId>& fetches,
                                       const TimingInputs& inputs, int warmup, int steps,
                                       uint64_t seed = 7, std::vector<double>* steps_ms = nullptr);

// The nodes profiling runs in low precision: every allow/infer/clear op but the leaves.
std::vector<char> all_low_nodes(const Graph& g, const AmpLists& lists);

struct CastTiming {
  int64_t elements = 0;
  DType from = DType::f32, to = DType::f32;
  double ms = 0;
};
// The hardware counters of each node of one f32 step of g (runtime/hardware_counters.h),
// read over as many passes of the step as the device needs, after a warm step, in windows of
// Backend::counter_slots_at_once() nodes: by node id, unread for nodes that did not run.
// Where the backend reads none, by_node is empty and `unavailable` says why
// (Backend::make_counter_reader).
struct NodeCounterRead {
  std::vector<CounterValues> by_node;
  std::string source;       // what read them ("CUPTI range profiler")
  std::string unavailable;  // why not
  int passes = 0;           // of the step, per window
  int windows = 0;          // of nodes, each read over its own passes
};
NodeCounterRead read_node_counters(const Graph& g, VariableStore& vars,
                                   const std::vector<ValueId>& fetches, const TimingInputs& inputs,
                                   uint64_t seed = 7);

struct BothPrecisionTimes {
  std::vector<double> fp32_ms;    // by node id of the graph given
  std::vector<double> low_ms;     // same ids; = fp32_ms for nodes kept f32
  std::vector<char> low;          // the nodes timed in low precision
  std::vector<CastTiming> casts;  // the casts of the low-precision copy
  // Each timed step's total node time, per precision, in order: how far the repeats agree.
  std::vector<double> fp32_steps_ms, low_steps_ms;
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
// A calibration is first checked against the measured f32 times (f32_agreement,
// amp/calibration.h); when it does not fit, both precisions are timed as without one.
// CostTable::calibration says which.
CostTable graph_costs(const Graph& g, VariableStore& vars, const std::vector<ValueId>& fetches,
                      const TimingInputs& inputs, const PrecisionConfig& precision);

// The costs of the training graph of `spec` (node ids as build_training_graph(spec) gives
// before casts): graph_costs on random inputs with separate variables (the model being
// trained is untouched), measured on `backend`, the one the model will train on.
CostTable profile_costs(const TrainingGraphSpec& spec, std::shared_ptr<Backend> backend);
// `p` for one of --low-precision auto's types: low and lists of that type, the calibration
// only where it was made for it (the other type's low times are measured).
PrecisionConfig precision_for_low_type(const PrecisionConfig& p, DType low);
// `spec` ready for build_training_graph: for cost-aware without costs, with
// precision.costs = profile_costs(spec, backend) (auto: bf16's, and precision.f16_costs the
// same for f16); else unchanged.
TrainingGraphSpec with_profiled_costs(TrainingGraphSpec spec, std::shared_ptr<Backend> backend);

// One node of a profile (--profile-out): what it computes, on what, and its time.
struct NodeTiming {
  int graph = 0;  // which attached graph: 0, or a GAN's D (0) and G (1) step graphs
  std::string name;
  OpKind kind{};
  DType dtype = DType::f32;  // its compute type
  std::vector<Shape> inputs, outputs;
  std::vector<DType> input_dtypes, output_dtypes;
  int64_t flops = 0;  // graph/flops.h
  int64_t bytes = 0;  // every input and output once: what it reads and writes at least
  int64_t calls = 0;
  double ms = 0;                // all calls together
  std::vector<double> call_ms;  // each of the first kMaxCallSamples calls' (the median's)
  static constexpr size_t kMaxCallSamples = 1024;  // a long --profile run stays small
};

// --profile and bench's breakdown: the time of timed steps per op kind and compute type.
// attach() hooks an executable's node timings (several executables, e.g. a GAN's two step
// graphs, add into one profile); by_op() gives the totals per kind (name -> ms, largest
// first, kinds that ran only), by_op_dtype() per (kind, dtype), both summed from nodes(),
// per node in the order they first ran.
class OpProfile {
 public:
  void reset();
  // Times `exe`'s nodes (those of `graph`) into this profile, or stops timing them.
  void attach(Executable& exe, const Graph& graph, bool on);
  std::vector<std::pair<std::string, double>> by_op() const;
  std::map<std::pair<OpKind, DType>, double> by_op_dtype() const;
  const std::vector<NodeTiming>& nodes() const { return nodes_; }
  double total_ms() const;

 private:
  void add(const Graph& graph, NodeId id, double ms);
  std::vector<const Graph*> graphs_;                         // in the order attached
  std::map<std::pair<const Graph*, NodeId>, size_t> index_;  // into nodes_
  std::vector<NodeTiming> nodes_;
};

// --profile-out's "nodes" (docs/usage.md): per node of `p`, in the order they first ran,
// its graph, name, op, compute dtype, inputs and outputs (shape, dtype), FLOPs, bytes,
// calls, the median and mean ms per call, and ms per step over `steps` timed steps: the
// median call times the calls a step makes, so that the first step's one-time costs (kernel
// set-up, first touches of memory) do not count.
nlohmann::json profile_nodes_json(const OpProfile& p, int64_t steps);

}  // namespace campo
