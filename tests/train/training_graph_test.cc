// apply_policy, the one precision-policy switch of both sessions, and build_training_graph,
// which takes the costs it is given: cost-aware pads the low-precision GEMMs the padding
// decision says pay (and only with precision.padding), and cost-aware without costs is an
// internal error rather than a hidden profiling run.
#include "train/training_graph.h"

#include <gtest/gtest.h>

#include "amp/padding.h"
#include "runtime/cpu_backend.h"
#include "train/gan_trainer.h"

namespace campo {
namespace {

TrainingGraphSpec lenet_spec(Precision policy) {
  TrainingGraphSpec spec;
  spec.model = "lenet";
  spec.image_shape = {1, 28, 28};
  spec.batch = 8;
  spec.precision.policy = policy;
  return spec;
}

// Costs under which low precision pays on every node.
std::shared_ptr<const CostTable> low_pays(size_t nodes) {
  auto costs = std::make_shared<CostTable>();
  costs->nodes.assign(nodes, NodeCost{1.0, 0.5});
  costs->cast = CastCostModel{1e-4, 1e-8};
  return costs;
}

TEST(ApplyPolicyTest, CostAwarePadsTheGemmsTheDecisionSaysPay) {
  Graph probe;
  VariableStore probe_vars(1, default_cpu_backend());
  build_training_graph(probe, probe_vars, lenet_spec(Precision::fp32));
  const auto costs = low_pays(size_t(probe.num_nodes()));
  for (bool pays : {false, true}) {
    Graph g;
    VariableStore vars(1, default_cpu_backend());
    build_training_graph(g, vars, lenet_spec(Precision::fp32));
    PrecisionConfig precision = lenet_spec(Precision::cost_aware).precision;
    int asked = 0;
    const PolicyResult r = apply_policy(g, precision, costs.get(), default_cpu_backend(),
                                        [&](const Graph&, NodeId id) {
                                          EXPECT_TRUE(is_padding_candidate(g, id));
                                          ++asked;
                                          return pays;
                                        });
    ASSERT_NE(r.cost_plan, nullptr);
    // LeNet's 400-120-84-10 classifier has unaligned low-precision GEMMs.
    EXPECT_GT(r.padding_candidates, 0);
    EXPECT_EQ(asked, r.padding_candidates);
    EXPECT_EQ(r.padded, pays ? r.padding_candidates : 0);
    int padded = 0;
    for (const Node& n : g.nodes()) padded += n.pad_to > 0;
    EXPECT_EQ(padded, r.padded);
  }
  // Without precision.padding the decision is never asked for and nothing is padded.
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  build_training_graph(g, vars, lenet_spec(Precision::fp32));
  PrecisionConfig precision = lenet_spec(Precision::cost_aware).precision;
  precision.padding = false;
  const PolicyResult r =
      apply_policy(g, precision, costs.get(), default_cpu_backend(), [](const Graph&, NodeId) {
        ADD_FAILURE() << "asked with padding off";
        return true;
      });
  EXPECT_GT(r.padding_candidates, 0);
  EXPECT_EQ(r.padded, 0);
}

TEST(ApplyPolicyTest, Fp32AndAmpNeedNoCostsAndCostAwareDoes) {
  for (Precision policy : {Precision::fp32, Precision::amp}) {
    Graph g;
    VariableStore vars(1, default_cpu_backend());
    build_training_graph(g, vars, lenet_spec(Precision::fp32));
    PrecisionConfig precision;
    precision.policy = policy;
    const PolicyResult r = apply_policy(g, precision, nullptr, default_cpu_backend());
    EXPECT_EQ(r.cost_plan, nullptr);
    int low = 0;
    for (const Node& n : g.nodes()) low += is_low_precision(n.dtype);
    EXPECT_EQ(low > 0, policy == Precision::amp);
  }
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  build_training_graph(g, vars, lenet_spec(Precision::fp32));
  EXPECT_THROW(
      apply_policy(g, lenet_spec(Precision::cost_aware).precision, nullptr, default_cpu_backend()),
      Error);
}

// build_training_graph no longer profiles on its own: the costs come from the caller
// (with_profiled_costs, train/profiling.h), and a missing table is an internal error.
TEST(TrainingGraphTest, CostAwareTakesTheCostsItIsGiven) {
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  EXPECT_THROW(build_training_graph(g, vars, lenet_spec(Precision::cost_aware)), Error);
  Graph probe;
  VariableStore probe_vars(1, default_cpu_backend());
  build_training_graph(probe, probe_vars, lenet_spec(Precision::fp32));
  TrainingGraphSpec spec = lenet_spec(Precision::cost_aware);
  spec.precision.padding = false;  // padding decisions are timed
  spec.precision.costs = low_pays(size_t(probe.num_nodes()));
  Graph costed;
  VariableStore costed_vars(1, default_cpu_backend());
  const TrainingGraphInfo info = build_training_graph(costed, costed_vars, spec);
  EXPECT_EQ(info.costs, spec.precision.costs);
  ASSERT_NE(info.cost_plan, nullptr);
  EXPECT_GT(info.summary.low_nodes, 0);
}

// The GAN's step graphs go through the same apply_policy: under cost-aware each reports
// its padding candidates (DCGAN's convolutions are no GEMM candidates, so there are none;
// the padding itself is the path ApplyPolicyTest covers).
TEST(ApplyPolicyTest, GanStepGraphsGoThroughIt) {
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::adam;
  DcganOptions model;
  model.image_size = 32;
  model.channels = 1;
  model.ngf = model.ndf = 8;
  PrecisionConfig precision;
  precision.policy = Precision::cost_aware;
  precision.profile_warmup = 0;
  precision.profile_steps = 1;
  GanSession s(model, 4, adam, 1, default_cpu_backend(), 4, precision);
  for (auto [graph, policy] :
       {std::pair{&s.d_graph(), &s.d_policy()}, {&s.g_graph(), &s.g_policy()}}) {
    ASSERT_NE(policy->cost_plan, nullptr);
    EXPECT_EQ(policy->padding_candidates, int(padding_candidates(*graph).size()));
    int padded = 0;
    for (const Node& n : graph->nodes()) padded += n.pad_to > 0;
    EXPECT_EQ(padded, policy->padded);
  }
}

}  // namespace
}  // namespace campo
