// Reading hardware counters per node in the profiling step (train/profiling.h's
// read_node_counters, Executable::run_bracketed) and planning with counter models
// (graph_costs), on the CPU: a backend whose counter reader makes up values by slot and needs
// two passes stands in for CUPTI; the CPU's own backend reads none, and a calibration whose
// models use counters then predicts from their analytic models, and says so.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "amp/calibration.h"
#include "graph/builder.h"
#include "runtime/cpu_backend.h"
#include "tests/amp/calibration_test_util.h"
#include "tests/test_util.h"
#include "train/profiling.h"

namespace campo {
namespace {

// Counters by slot (dram_bytes = 1000 + slot), instructions = the passes that bracketed the
// slot; two passes, each bracketing the slots of the first in the same order.
class TwoPassReader final : public NodeCounterReader {
 public:
  explicit TwoPassReader(size_t slots) : brackets_(slots, 0) {}
  void begin_pass() override {
    ASSERT_FALSE(open_);
    open_ = true;
    order_.clear();
  }
  void start(size_t slot) override {
    ASSERT_TRUE(open_);
    ASSERT_LT(slot, brackets_.size());
    order_.push_back(slot);
    ++brackets_[slot];
  }
  void stop(size_t) override {}
  bool end_pass() override {
    open_ = false;
    if (first_.empty()) first_ = order_;
    EXPECT_EQ(order_, first_) << "a pass issued other nodes than the first";
    return ++passes_ == 2;
  }
  std::vector<CounterValues> values() override {
    std::vector<CounterValues> out(brackets_.size(), unread_counters());
    for (size_t s = 0; s < brackets_.size(); ++s) {
      if (!brackets_[s]) continue;
      out[s] = {1000.0 + double(s), 50, 10, 90, double(brackets_[s])};
    }
    return out;
  }
  std::string source() const override { return "test reader"; }

 private:
  std::vector<int> brackets_;
  std::vector<size_t> order_, first_;
  bool open_ = false;
  int passes_ = 0;
};

class CountingCpuBackend final : public CpuBackend {
 public:
  explicit CountingCpuBackend(size_t window = SIZE_MAX) : window_(window) {}
  size_t counter_slots_at_once() const override { return window_; }
  std::string counters_unavailable() const override { return ""; }
  std::unique_ptr<NodeCounterReader> make_counter_reader(size_t slots, std::string&) override {
    return std::make_unique<TwoPassReader>(slots);
  }

 private:
  size_t window_;
};

struct SmallGraph {
  Graph g;
  VariableStore vars;
  NodeId matmul = -1, relu = -1;
  std::vector<ValueId> fetches;
  explicit SmallGraph(std::shared_ptr<Backend> backend) : vars(3, std::move(backend)) {
    Builder b(g, vars);
    const ValueId x = b.placeholder("x", {64, 96});
    const ValueId w = b.variable("w", {96, 32}, Init::normal(0.0f, 0.1f));
    const ValueId y = b.matmul(x, w);
    const ValueId z = b.relu(y);
    matmul = g.value(y).producer;
    relu = g.value(z).producer;
    fetches = {z};
  }
};

TEST(CounterProfilingTest, ReadsEveryNodeOverThePassesTheDeviceNeeds) {
  SmallGraph s(std::make_shared<CountingCpuBackend>());
  const NodeCounterRead r = read_node_counters(s.g, s.vars, s.fetches, TimingInputs{});
  EXPECT_EQ(r.passes, 2);
  EXPECT_EQ(r.source, "test reader");
  EXPECT_TRUE(r.unavailable.empty());
  ASSERT_EQ(r.by_node.size(), size_t(s.g.num_nodes()));
  const CounterValues& mm = r.by_node[size_t(s.matmul)];
  const CounterValues& relu = r.by_node[size_t(s.relu)];
  ASSERT_TRUE(all_read(mm));
  ASSERT_TRUE(all_read(relu));
  EXPECT_EQ(mm[size_t(Counter::instructions)], 2);  // bracketed once a pass
  EXPECT_LT(mm[size_t(Counter::dram_bytes)], relu[size_t(Counter::dram_bytes)]);  // slot order
  std::set<double> distinct;
  for (const CounterValues& v : r.by_node)
    if (all_read(v)) EXPECT_TRUE(distinct.insert(v[size_t(Counter::dram_bytes)]).second);
}

// A reader that holds two nodes at a time reads the step two nodes a window, each window over
// its own passes: every node the whole-step reader reads, once a pass.
TEST(CounterProfilingTest, ALargeStepIsReadAWindowOfNodesAtATime) {
  SmallGraph whole(std::make_shared<CountingCpuBackend>());
  SmallGraph windowed(std::make_shared<CountingCpuBackend>(2));
  const NodeCounterRead a = read_node_counters(whole.g, whole.vars, whole.fetches, TimingInputs{});
  const NodeCounterRead b =
      read_node_counters(windowed.g, windowed.vars, windowed.fetches, TimingInputs{});
  EXPECT_EQ(a.windows, 1);
  int read = 0;
  for (size_t id = 0; id < a.by_node.size(); ++id) {
    EXPECT_EQ(all_read(a.by_node[id]), all_read(b.by_node[id])) << "node " << id;
    if (!all_read(b.by_node[id])) continue;
    ++read;
    EXPECT_EQ(b.by_node[id][size_t(Counter::instructions)], 2) << "node " << id;
  }
  EXPECT_GE(read, 2);
  EXPECT_GE(b.windows, 2);
  EXPECT_EQ(b.passes, 2);
}

TEST(CounterProfilingTest, TheCpuReadsNoneAndSaysWhy) {
  SmallGraph s(default_cpu_backend());
  const NodeCounterRead r = read_node_counters(s.g, s.vars, s.fetches, TimingInputs{});
  EXPECT_TRUE(r.by_node.empty());
  // With what the CPU's perf_event_open finds, which depends on the machine.
  EXPECT_EQ(
      r.unavailable.rfind(
          "the cpu backend reads no hardware counters per node (perf_event_open(instructions)", 0),
      0u)
      << r.unavailable;
}

// A calibration whose MatMul model uses dram_bytes: planned where counters are read, the
// node is predicted by it; where they are not, by its analytic model, in a line that says so.
TEST(CounterProfilingTest, PlanningPredictsWithCountersWhereReadElseAnalytically) {
  auto cal = std::make_shared<Calibration>(testing::sample_calibration());
  OpModel m;
  m.key = "MatMul";
  m.features = {Feature::dram_bytes};
  m.rho = {0.95};
  m.weights = {1e-3};
  m.sigma = 0.5;
  m.heldout_mape = 4;
  OpModel analytic;
  analytic.key = "MatMul";
  analytic.fit = "sigma+bias";
  analytic.sigma = 0.25;
  analytic.heldout_mape = 9;
  m.analytic = std::make_shared<const OpModel>(analytic);
  cal->ops.erase("MatMul:unaligned");
  cal->ops["MatMul"] = m;
  PrecisionConfig pc;
  pc.policy = Precision::cost_aware;
  pc.calibration = cal;
  for (const bool counting : {true, false}) {
    std::shared_ptr<Backend> backend =
        counting ? std::shared_ptr<Backend>(std::make_shared<CountingCpuBackend>())
                 : default_cpu_backend();
    SmallGraph s(backend);
    const CostTable costs = graph_costs(s.g, s.vars, s.fetches, TimingInputs{}, pc);
    const NodeCost& c = costs.nodes[size_t(s.matmul)];
    ASSERT_GT(c.fp32_ms, 0);
    if (counting) {
      EXPECT_EQ(costs.hardware_counters, "read (test reader, 2 passes)");
      EXPECT_GE(c.low_ms, 0.5 * c.fp32_ms + 1.0);  // 1e-3 ms per "byte", 1000 + its slot
      // A step read in windows says how many.
      SmallGraph windowed(std::make_shared<CountingCpuBackend>(2));
      const int windows =
          read_node_counters(windowed.g, windowed.vars, windowed.fetches, TimingInputs{}).windows;
      ASSERT_GE(windows, 2);
      EXPECT_EQ(graph_costs(windowed.g, windowed.vars, windowed.fetches, TimingInputs{}, pc)
                    .hardware_counters,
                "read (test reader, 2 passes in each of " + std::to_string(windows) +
                    " windows of nodes)");
    } else {
      EXPECT_EQ(costs.hardware_counters, "unavailable (" +
                                             default_cpu_backend()->counters_unavailable() +
                                             "): predicted from the analytic features");
      EXPECT_DOUBLE_EQ(c.low_ms, 0.25 * c.fp32_ms);
    }
  }
}

}  // namespace
}  // namespace campo
