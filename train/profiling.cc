#include "train/profiling.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <ostream>

#include "graph/executor.h"
#include "graph/flops.h"

namespace campo {

namespace fs = std::filesystem;

TimingInputs training_timing_inputs(int64_t classes) {
  TimingInputs in;
  in.constants = {{"lr", 0.0f}, {"loss_scale", 1.0f}, {"inv_loss_scale", 1.0f}, {"step", 1.0f}};
  in.int_range = classes;
  return in;
}

namespace {

CompileOptions compile_options(const std::vector<ValueId>& fetches, uint64_t seed,
                               std::shared_ptr<SharedArena> arena) {
  CompileOptions co;
  co.fetches = fetches;
  co.seed = seed;
  co.arena = std::move(arena);
  return co;
}

// One compiled graph with its placeholders filled, keeping every node's fastest time over
// its timed steps.
class NodeTimeSampler {
 public:
  // `arena`: shared with the other precision's sampler (null: its own).
  NodeTimeSampler(const Graph& g, VariableStore& vars, const std::vector<ValueId>& fetches,
                  const TimingInputs& inputs, uint64_t seed,
                  std::shared_ptr<SharedArena> arena = nullptr)
      : exe_(g, vars, compile_options(fetches, seed, std::move(arena))),
        best_(size_t(g.num_nodes()), std::numeric_limits<double>::infinity()) {
    Rng rng(seed);
    for (const Node& n : g.nodes()) {
      if (n.kind != OpKind::Placeholder || !exe_.has_input(n.name)) continue;
      const Value& placeholder = g.value(n.outputs[0]);
      Tensor t = Tensor::empty(placeholder.shape, placeholder.dtype);
      if (auto it = inputs.tensors.find(n.name); it != inputs.tensors.end()) {
        t.copy_from(it->second);
      } else if (auto c = inputs.constants.find(n.name); c != inputs.constants.end()) {
        CAMPO_CHECK(t.dtype() == DType::f32, "timing: constant for non-f32 placeholder ", n.name);
        std::fill_n(t.data_as<float>(), t.numel(), c->second);
      } else if (t.dtype() == DType::i32) {
        for (int64_t i = 0; i < t.numel(); ++i)
          t.data_as<int32_t>()[i] =
              int32_t(rng.below(uint64_t(std::max<int64_t>(1, inputs.int_range))));
      } else {
        CAMPO_CHECK(t.dtype() == DType::f32, "timing: placeholder ", n.name, " of type ",
                    dtype_name(t.dtype()), " needs an input");
        for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = rng.normal();
      }
      exe_.feed(n.name, t);
    }
    exe_.set_node_hook([this](NodeId id, double ms) {
      best_[size_t(id)] = std::min(best_[size_t(id)], ms);
      step_ms_ += ms;
    });
  }
  void run_untimed() {
    exe_.set_timing(false);
    exe_.run();
  }
  void run_timed() {
    exe_.set_timing(true);
    step_ms_ = 0;
    exe_.run();
    steps_ms_.push_back(step_ms_);
  }
  // Each timed step's total of node times, in order.
  const std::vector<double>& steps_ms() const { return steps_ms_; }
  Executable& executable() { return exe_; }
  // By node id; 0 for nodes that never ran.
  std::vector<double> fastest() const {
    std::vector<double> out = best_;
    for (double& b : out)
      if (!std::isfinite(b)) b = 0.0;
    return out;
  }

 private:
  Executable exe_;
  std::vector<double> best_;
  double step_ms_ = 0;
  std::vector<double> steps_ms_;
};

}  // namespace

std::vector<double> measure_node_times(const Graph& g, VariableStore& vars,
                                       const std::vector<ValueId>& fetches,
                                       const TimingInputs& inputs, int warmup, int steps,
                                       uint64_t seed, std::vector<double>* steps_ms) {
  CAMPO_CHECK(warmup >= 0 && steps > 0, "timing needs >= 0 warm-up and > 0 timed steps");
  NodeTimeSampler timer(g, vars, fetches, inputs, seed);
  for (int i = 0; i < warmup; ++i) timer.run_untimed();
  for (int i = 0; i < steps; ++i) timer.run_timed();
  if (steps_ms) *steps_ms = timer.steps_ms();
  return timer.fastest();
}

namespace {

// The brackets of slots [first, first + count) only, renumbered from 0: a reader that holds
// fewer ranges than the step has nodes reads them a window at a time.
class WindowBrackets final : public NodeBrackets {
 public:
  WindowBrackets(NodeBrackets& inner, size_t first, size_t count)
      : inner_(inner), first_(first), count_(count) {}
  void start(size_t slot) override {
    if (slot - first_ < count_) inner_.start(slot - first_);  // unsigned: below first_ wraps
  }
  void stop(size_t slot) override {
    if (slot - first_ < count_) inner_.stop(slot - first_);
  }

 private:
  NodeBrackets& inner_;
  size_t first_, count_;
};

}  // namespace

NodeCounterRead read_node_counters(const Graph& g, VariableStore& vars,
                                   const std::vector<ValueId>& fetches, const TimingInputs& inputs,
                                   uint64_t seed) {
  NodeCounterRead r;
  Backend& backend = vars.backend();
  r.unavailable = backend.counters_unavailable();
  if (!r.unavailable.empty()) return r;  // before compiling anything
  NodeTimeSampler sampler(g, vars, fetches, inputs, seed);
  Executable& exe = sampler.executable();
  const std::vector<NodeId>& schedule = exe.schedule();
  const size_t window = std::max<size_t>(1, backend.counter_slots_at_once());
  std::vector<CounterValues> by_node(size_t(g.num_nodes()), unread_counters());
  bool warm = false;
  for (size_t first = 0; first < schedule.size(); first += window) {
    const size_t count = std::min(window, schedule.size() - first);
    std::unique_ptr<NodeCounterReader> reader = backend.make_counter_reader(count, r.unavailable);
    if (!reader) return r;             // by_node empty: none read
    if (!warm) sampler.run_untimed();  // algorithm searches and lazy tables are not counted
    warm = true;
    // The hardware counts a few counters at a time: the same step once per pass.
    WindowBrackets brackets(*reader, first, count);
    constexpr int kMaxPasses = 64;
    for (int pass = 1;; ++pass) {
      CAMPO_CHECK(pass <= kMaxPasses, "hardware counters: ", reader->source(), " needs more than ",
                  kMaxPasses, " passes of the step");
      reader->begin_pass();
      exe.run_bracketed(brackets);
      if (reader->end_pass()) {
        r.passes = std::max(r.passes, pass);
        break;
      }
    }
    const std::vector<CounterValues> values = reader->values();
    CAMPO_CHECK(values.size() == count, "internal: ", values.size(),
                " counter slots for a window of ", count, " nodes");
    for (size_t i = 0; i < count; ++i) by_node[size_t(schedule[first + i])] = values[i];
    r.source = reader->source();
    ++r.windows;
  }
  r.by_node = std::move(by_node);
  return r;
}

std::vector<char> all_low_nodes(const Graph& g, const AmpLists& lists) {
  std::vector<char> low(size_t(g.num_nodes()), 0);
  for (NodeId i = 0; i < g.num_nodes(); ++i) low[size_t(i)] = may_run_low(g.node(i), lists);
  return low;
}

BothPrecisionTimes measure_both_precisions(const Graph& g, VariableStore& vars,
                                           const std::vector<ValueId>& fetches,
                                           const TimingInputs& inputs, const AmpLists& lists,
                                           DType low, int warmup, int steps, uint64_t seed) {
  return measure_both_precisions(g, vars, fetches, inputs, all_low_nodes(g, lists), low, warmup,
                                 steps, seed);
}

BothPrecisionTimes measure_both_precisions(const Graph& g, VariableStore& vars,
                                           const std::vector<ValueId>& fetches,
                                           const TimingInputs& inputs,
                                           const std::vector<char>& low_nodes, DType low,
                                           int warmup, int steps, uint64_t seed) {
  BothPrecisionTimes t;
  t.low = low_nodes;
  Graph glow = g;  // node and value ids of g are kept; casts are appended
  apply_precision(glow, t.low, low);
  CAMPO_CHECK(warmup >= 0 && steps > 0, "timing needs >= 0 warm-up and > 0 timed steps");
  // Both compiled at once and their steps interleaved, so that whatever else the machine
  // does in the meantime falls on both precisions alike; they take turns in one arena.
  auto arena = std::make_shared<SharedArena>(vars.backend_ptr());
  NodeTimeSampler f32(g, vars, fetches, inputs, seed, arena),
      lowp(glow, vars, fetches, inputs, seed, arena);
  for (int i = 0; i < warmup; ++i) {
    f32.run_untimed();
    lowp.run_untimed();
  }
  for (int i = 0; i < steps; ++i) {
    f32.run_timed();
    lowp.run_timed();
  }
  t.fp32_ms = f32.fastest();
  t.fp32_steps_ms = f32.steps_ms();
  t.low_steps_ms = lowp.steps_ms();
  const std::vector<double> tlow = lowp.fastest();
  t.low_ms = t.fp32_ms;
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (t.low[size_t(i)]) t.low_ms[size_t(i)] = tlow[size_t(i)];
  for (NodeId id : glow.nodes_of_kind(OpKind::Cast)) {
    if (tlow[size_t(id)] <= 0) continue;  // dead code
    const Node& n = glow.node(id);
    t.casts.push_back({shape_numel(glow.value(n.inputs[0]).shape), glow.value(n.inputs[0]).dtype,
                       attrs_as<CastAttrs>(n.attrs).to, tlow[size_t(id)]});
  }
  return t;
}

namespace {

PrecisionConfig without_calibration(PrecisionConfig pc) {
  pc.calibration = nullptr;
  return pc;
}

}  // namespace

CostTable graph_costs(const Graph& g, VariableStore& vars, const std::vector<ValueId>& fetches,
                      const TimingInputs& inputs, const PrecisionConfig& pc) {
  CAMPO_CHECK(pc.profile_warmup >= 0 && pc.profile_steps > 0,
              "profiling needs >= 0 warm-up and > 0 timed steps");
  if (pc.calibration) {
    const Calibration& cal = *pc.calibration;
    CAMPO_CHECK(cal.low == pc.low, "the calibration was made for ", dtype_name(cal.low),
                ", this run's low precision is ", dtype_name(pc.low),
                "; run `campo calibrate --device ", cal.machine.kind, " --low-precision ",
                pc.low == DType::f16 ? "fp16" : "bf16", "`");
    // Models that use hardware counters read them in an f32 step of their own where the
    // device can; elsewhere those nodes are predicted by their analytic models.
    std::vector<CounterValues> counters;
    std::string counters_note;
    if (uses_counters(cal)) {
      NodeCounterRead read = read_node_counters(g, vars, fetches, inputs);
      counters = std::move(read.by_node);
      counters_note =
          counters.empty()
              ? "unavailable (" + read.unavailable + "): predicted from the analytic features"
              : "read (" + read.source + ", " + std::to_string(read.passes) + " passes" +
                    (read.windows > 1 ? " in each of " + std::to_string(read.windows) +
                                            " windows of nodes"
                                      : std::string()) +
                    ")";
    }
    const std::vector<char> untrusted = untrusted_nodes(g, cal, pc.lists, counters);
    CostTable costs;
    std::vector<double> t32;
    if (std::find(untrusted.begin(), untrusted.end(), 1) == untrusted.end()) {
      t32 = measure_node_times(g, vars, fetches, inputs, pc.profile_warmup, pc.profile_steps);
      costs = predict_costs(g, t32, cal, pc.lists, counters);
    } else {
      // The nodes the calibration cannot predict are timed in low precision too, in steps
      // interleaved with the f32 ones; the others are predicted from the same f32 times.
      const BothPrecisionTimes t = measure_both_precisions(
          g, vars, fetches, inputs, untrusted, pc.low, pc.profile_warmup, pc.profile_steps);
      t32 = t.fp32_ms;
      costs = predict_costs(g, t.fp32_ms, cal, pc.lists, counters);
      costs.low_measured.assign(size_t(g.num_nodes()), 0);
      for (NodeId i = 0; i < g.num_nodes(); ++i) {
        if (!untrusted[size_t(i)] || t.fp32_ms[size_t(i)] <= 0) continue;  // dead code
        costs.nodes[size_t(i)].low_ms = t.low_ms[size_t(i)];
        costs.low_measured[size_t(i)] = 1;
      }
    }
    costs.hardware_counters = counters_note;
    // The calibration checked against what this graph measures: far off (the machine busy
    // now or then, another machine's file, a doctored one), its predictions are not used and
    // both precisions are timed below, as without a calibration.
    costs.calibration = calibration_fit(f32_agreement(g, t32, cal), cal);
    if (costs.calibration.verdict != CalibrationFit::Verdict::misfit) return costs;
    CostTable timed = graph_costs(g, vars, fetches, inputs, without_calibration(pc));
    timed.calibration = costs.calibration;
    return timed;
  }
  const BothPrecisionTimes t = measure_both_precisions(g, vars, fetches, inputs, pc.lists, pc.low,
                                                       pc.profile_warmup, pc.profile_steps);
  CostTable costs;
  costs.nodes.resize(size_t(g.num_nodes()));
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    costs.nodes[size_t(i)] = {t.fp32_ms[size_t(i)], t.low_ms[size_t(i)]};
  // One cast model per direction (they differ on CPUs), each C_I + r * n by least squares;
  // both together when a direction has fewer than two distinct sizes.
  std::vector<std::pair<int64_t, double>> all, to_low, to_f32;
  for (const CastTiming& c : t.casts) {
    all.push_back({c.elements, c.ms});
    (c.to == DType::f32 ? to_f32 : to_low).push_back({c.elements, c.ms});
  }
  auto fit = [](const std::vector<std::pair<int64_t, double>>& samples) {
    CastCostModel m = fit_cast_model(samples);
    m.fixed_ms = std::max(0.0, m.fixed_ms);
    m.per_element_ms = std::max(0.0, m.per_element_ms);
    return m;
  };
  auto distinct_sizes = [](const std::vector<std::pair<int64_t, double>>& samples) {
    std::vector<int64_t> n;
    for (const auto& s : samples) n.push_back(s.first);
    std::sort(n.begin(), n.end());
    return std::unique(n.begin(), n.end()) - n.begin();
  };
  costs.cast = fit(all);
  if (distinct_sizes(to_low) >= 2 && distinct_sizes(to_f32) >= 2) {
    costs.cast = fit(to_low);
    costs.cast_to_f32 = fit(to_f32);
  }
  return costs;
}

CostTable profile_costs(const TrainingGraphSpec& spec, std::shared_ptr<Backend> backend) {
  CAMPO_CHECK(backend != nullptr, "profile_costs: no backend to measure on");
  TrainingGraphSpec fp32 = spec;
  fp32.precision.policy = Precision::fp32;
  fp32.precision.calibration = nullptr;
  fp32.precision.rules = nullptr;  // the profiling step times the graph before any plan
  // ... of f32 weights: the node ids of the plan's graph are those of the graph before its
  // weights are retyped (pure low-precision training adds its casts after the plan).
  fp32.optimizer.weight_dtype = fp32.optimizer.state_dtype = DType::f32;
  Graph g32;
  VariableStore v32(1, std::move(backend));  // the profiling step's executables run there too
  const TrainingGraphInfo info = build_training_graph(g32, v32, fp32);
  return graph_costs(g32, v32, info.fetches(),
                     training_timing_inputs(spec.model_options.num_classes), spec.precision);
}

PrecisionConfig precision_for_low_type(const PrecisionConfig& p, DType low) {
  PrecisionConfig one = p;
  one.low_mode = low == DType::f16 ? LowPrecisionMode::fp16 : LowPrecisionMode::bf16;
  one.low = low;
  if (low == DType::f16) one.lists = p.f16_lists;
  if (one.calibration && one.calibration->low != low) one.calibration = nullptr;  // timed
  return one;
}

TrainingGraphSpec with_profiled_costs(TrainingGraphSpec spec, std::shared_ptr<Backend> backend) {
  PrecisionConfig& p = spec.precision;
  if (p.policy != Precision::cost_aware || p.costs) return spec;
  if (!p.automatic()) {
    p.costs = std::make_shared<const CostTable>(profile_costs(spec, std::move(backend)));
    return spec;
  }
  // auto: f32 against bf16, then f32 against f16, each as a run of that one type measures.
  for (DType low : {DType::bf16, DType::f16}) {
    TrainingGraphSpec one = spec;
    one.precision = precision_for_low_type(p, low);
    auto costs = std::make_shared<const CostTable>(profile_costs(one, backend));
    (low == DType::f16 ? p.f16_costs : p.costs) = std::move(costs);
  }
  return spec;
}

void OpProfile::reset() {
  graphs_.clear();
  index_.clear();
  nodes_.clear();
}

void OpProfile::attach(Executable& exe, const Graph& graph, bool on) {
  exe.set_timing(on);
  if (on) {
    if (std::find(graphs_.begin(), graphs_.end(), &graph) == graphs_.end())
      graphs_.push_back(&graph);
    exe.set_node_hook([this, g = &graph](NodeId id, double ms) { add(*g, id, ms); });
  } else {
    exe.set_node_hook(nullptr);
  }
}

void OpProfile::add(const Graph& g, NodeId id, double ms) {
  auto [it, inserted] = index_.try_emplace({&g, id}, nodes_.size());
  if (inserted) {
    const Node& n = g.node(id);
    NodeTiming t;
    t.graph = int(std::find(graphs_.begin(), graphs_.end(), &g) - graphs_.begin());
    t.name = n.name;
    t.kind = n.kind;
    t.dtype = n.dtype;
    t.flops = node_flops(g, n);
    auto side = [&](const std::vector<ValueId>& values, std::vector<Shape>& shapes,
                    std::vector<DType>& dtypes) {
      for (ValueId v : values) {
        const Value& value = g.value(v);
        shapes.push_back(value.shape);
        dtypes.push_back(value.dtype);
        t.bytes += shape_numel(value.shape) * int64_t(dtype_size(value.dtype));
      }
    };
    side(n.inputs, t.inputs, t.input_dtypes);
    side(n.outputs, t.outputs, t.output_dtypes);
    nodes_.push_back(std::move(t));
  }
  NodeTiming& t = nodes_[it->second];
  ++t.calls;
  t.ms += ms;
  if (t.call_ms.size() < NodeTiming::kMaxCallSamples) t.call_ms.push_back(ms);
}

std::map<std::pair<OpKind, DType>, double> OpProfile::by_op_dtype() const {
  std::map<std::pair<OpKind, DType>, double> ms;
  for (const NodeTiming& t : nodes_) ms[{t.kind, t.dtype}] += t.ms;
  return ms;
}

std::vector<std::pair<std::string, double>> OpProfile::by_op() const {
  std::map<OpKind, double> kinds;
  for (const NodeTiming& t : nodes_) kinds[t.kind] += t.ms;
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [kind, ms] : kinds)
    if (ms > 0) out.push_back({op_name(kind), ms});
  std::stable_sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second > b.second; });
  return out;
}

nlohmann::json profile_nodes_json(const OpProfile& p, int64_t steps) {
  auto values = [](const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) {
    nlohmann::json a = nlohmann::json::array();
    for (size_t i = 0; i < shapes.size(); ++i)
      a.push_back({{"shape", shapes[i]}, {"dtype", dtype_name(dtypes[i])}});
    return a;
  };
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeTiming& t : p.nodes()) {
    const double median = median_of(t.call_ms);  // a node in nodes() ran at least once
    const double calls_per_step = double(t.calls) / double(std::max<int64_t>(steps, 1));
    nodes.push_back({{"graph", t.graph},
                     {"name", t.name},
                     {"op", op_name(t.kind)},
                     {"dtype", dtype_name(t.dtype)},
                     {"inputs", values(t.inputs, t.input_dtypes)},
                     {"outputs", values(t.outputs, t.output_dtypes)},
                     {"flops", t.flops},
                     {"bytes", t.bytes},
                     {"calls", t.calls},
                     {"ms_per_call", median},
                     {"ms_per_call_mean", t.ms / double(std::max<int64_t>(t.calls, 1))},
                     {"ms_per_step", median * calls_per_step}});
  }
  return nodes;
}

double OpProfile::total_ms() const {
  double total = 0;
  for (const NodeTiming& t : nodes_) total += t.ms;
  return total;
}

}  // namespace campo
