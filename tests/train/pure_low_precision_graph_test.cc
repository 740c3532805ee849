// The training graph of pure low-precision training (OptimizerConfig's storage types): every
// parameter is a bf16 Variable stored in bf16, which the low-precision ops read directly (no
// per-step Cast to bf16, no weight copy) and the f32 ops through one Cast to f32 each; the
// updates rewrite the bf16 Variables themselves, with stochastic rounding as configured;
// optimizer state is bf16 when asked. The same under amp, cost-aware (with weight copies
// folded) and fp32, and the evaluation graph built over the store reads the weights as stored.
#include <gtest/gtest.h>

#include "amp/lists.h"
#include "graph/optimizer.h"
#include "runtime/cpu_backend.h"
#include "train/training_graph.h"

namespace campo {
namespace {

TrainingGraphSpec lenet_spec(Precision policy, DType weights, DType state) {
  TrainingGraphSpec spec;
  spec.model = "lenet";
  spec.image_shape = {1, 28, 28};
  spec.batch = 8;
  spec.precision.policy = policy;
  spec.precision.low = DType::bf16;
  spec.precision.lists = AmpLists::defaults(Device::cpu, DType::bf16);
  spec.precision.padding = false;  // no timing of padded GEMMs: the graph only
  spec.optimizer.weight_dtype = weights;
  spec.optimizer.state_dtype = state;
  spec.optimizer.stochastic_rounding = true;
  return spec;
}

// Costs under which low precision pays on every node.
std::shared_ptr<const CostTable> low_pays(size_t nodes) {
  auto costs = std::make_shared<CostTable>();
  costs->nodes.assign(nodes, NodeCost{1.0, 0.5});
  costs->cast = CastCostModel{1e-4, 1e-8};
  return costs;
}

void expect_stored_in(const Graph& g, const VariableStore& vars, DType weights, DType state) {
  for (const std::string& name : vars.names_of_kind(VariableKind::parameter)) {
    EXPECT_EQ(vars.at(name).dtype(), weights) << name;
    const ValueId v = g.node(g.find_node(name)).outputs[0];
    EXPECT_EQ(g.value(v).dtype, weights) << name;
    const NodeId update = optimizer_update_of(g, v);
    ASSERT_GE(update, 0) << name;
    for (NodeId c : g.consumers(v)) {
      const Node& n = g.node(c);
      if (n.kind != OpKind::Cast) continue;
      // Only casts to f32 (for the f32 readers): none to bf16, and no weight copy.
      EXPECT_EQ(attrs_as<CastAttrs>(n.attrs).to, DType::f32) << n.name;
      EXPECT_FALSE(n.weight_copy) << n.name;
    }
    EXPECT_TRUE(attrs_as<MomentumAttrs>(g.node(update).attrs).stochastic_rounding);
  }
  for (const std::string& name : vars.names_of_kind(VariableKind::optimizer_state)) {
    EXPECT_EQ(vars.at(name).dtype(), state) << name;
    EXPECT_EQ(g.value(g.node(g.find_node(name)).outputs[0]).dtype, state) << name;
  }
}

TEST(PureLowPrecisionGraphTest, WeightsAreBf16VariablesReadAsStored) {
  Graph probe;
  VariableStore probe_vars(1, default_cpu_backend());
  build_training_graph(probe, probe_vars, lenet_spec(Precision::fp32, DType::f32, DType::f32));
  for (Precision policy : {Precision::amp, Precision::cost_aware, Precision::fp32}) {
    for (DType state : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(precision_name(policy)) + ", state " + dtype_name(state));
      TrainingGraphSpec spec = lenet_spec(policy, DType::bf16, state);
      if (policy == Precision::cost_aware)
        spec.precision.costs = low_pays(size_t(probe.num_nodes()));
      Graph g;
      VariableStore vars(1, default_cpu_backend());
      build_training_graph(g, vars, spec);
      expect_stored_in(g, vars, DType::bf16, state);
    }
  }
  // f32 weights with bf16 state: the weights as before, the state in bf16.
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  build_training_graph(g, vars, lenet_spec(Precision::fp32, DType::f32, DType::bf16));
  for (const std::string& name : vars.names_of_kind(VariableKind::parameter))
    EXPECT_EQ(vars.at(name).dtype(), DType::f32) << name;
  for (const std::string& name : vars.names_of_kind(VariableKind::optimizer_state))
    EXPECT_EQ(vars.at(name).dtype(), DType::bf16) << name;
}

TEST(PureLowPrecisionGraphTest, StoredWeightsAreTheF32InitialisationRounded) {
  Graph g32, g16;
  VariableStore v32(1, default_cpu_backend()), v16(1, default_cpu_backend());
  build_training_graph(g32, v32, lenet_spec(Precision::amp, DType::f32, DType::f32));
  build_training_graph(g16, v16, lenet_spec(Precision::amp, DType::bf16, DType::f32));
  for (const std::string& name : v32.names_of_kind(VariableKind::parameter)) {
    const Tensor f32 = v32.read(name), bf16 = v16.read(name);
    ASSERT_EQ(bf16.dtype(), DType::bf16);
    for (int64_t i = 0; i < f32.numel(); ++i)
      ASSERT_EQ(bf16.data_as<uint16_t>()[i], f32_to_bf16_bits(f32.data_as<float>()[i]))
          << name << " " << i;
  }
}

}  // namespace
}  // namespace campo
