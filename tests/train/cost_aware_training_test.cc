// The cost-aware policy on LeNet's whole training graph (train/trainer.h builds it) with
// fixed cost tables: plans at the extremes, the exact search against every other plan, and
// folded casts and weight copies priced at nothing.
#include <gtest/gtest.h>

#include "amp/cost_aware.h"
#include "amp/policy.h"
#include "runtime/rng.h"
#include "train/trainer.h"

namespace campo {
namespace {

constexpr CostAwareOptions kTraversals{CostAwareSearch::traversals};

Graph lenet_training_graph(VariableStore& vars) {
  Graph g;
  TrainingGraphSpec spec;
  spec.model = "lenet";
  spec.image_shape = {1, 28, 28};
  spec.batch = 8;
  build_training_graph(g, vars, spec);
  return g;
}

TEST(CostAwareTest, LowNeverPaysGivesTheFp32Plan) {
  VariableStore vars(0, default_cpu_backend());
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 2.0});
  costs.cast = {0.01, 1e-6};
  CostAwarePlan p = plan_cost_aware(g, AmpLists::defaults(Device::cpu, DType::bf16), costs, kTraversals);
  for (NodeId i = 0; i < g.num_nodes(); ++i) EXPECT_FALSE(p.low[size_t(i)]) << g.node(i).name;
}

TEST(CostAwareTest, LowPaysOnAllowOpsGivesAmpsAllowAndDenyDecisionsAtNoMoreCost) {
  VariableStore vars(0, default_cpu_backend());
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 1.0});
  AmpLists lists = AmpLists::defaults(Device::cpu, DType::bf16);
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (lists.classify(g.node(i).kind) == AmpList::allow) costs.nodes[size_t(i)] = {100.0, 1.0};
  costs.cast = {0.01, 1e-6};
  CostAwarePlan p = plan_cost_aware(g, lists, costs, kTraversals);
  std::vector<char> amp = paint_amp(g, lists);
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    if (lists.classify(g.node(i).kind) == AmpList::allow) EXPECT_TRUE(p.low[size_t(i)]);
    if (lists.classify(g.node(i).kind) == AmpList::deny) EXPECT_FALSE(p.low[size_t(i)]);
  }
  // Where it differs from amp it is cheaper: e.g. BiasAddGrad after a low ReluGrad runs low
  // and casts its small [C] result instead of casting the large incoming gradient.
  // Never more cast cost than amp: the traversals only adopt a node when it removes cast cost.
  EXPECT_LE(predict_step_ms(g, costs, p.low), predict_step_ms(g, costs, amp) + 1e-9);
}

// On LeNet's whole training graph with random costs: never worse than the traversals, the
// amp plan or all-f32; and no single flip of a free node improves it (a local check of
// optimality on a graph too large to enumerate).
TEST(CostAwareTest, ExactSearchIsNoWorseThanAnyOtherPlan) {
  VariableStore vars(0, default_cpu_backend());
  Graph g = lenet_training_graph(vars);
  const AmpLists lists = AmpLists::defaults(Device::cpu, DType::bf16);
  const std::vector<char> amp = paint_amp(g, lists);
  Rng rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    CostTable costs;
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      costs.nodes.push_back({0.5 + rng.uniform(), 0.3 + rng.uniform()});
    costs.cast = {0.2 * rng.uniform(), 1e-4 * rng.uniform()};
    costs.cast_to_f32 = CastCostModel{0.2 * rng.uniform(), 1e-4 * rng.uniform()};
    const CostAwarePlan p = plan_cost_aware(g, lists, costs);
    const double tol = kCastTieBreakMs * g.num_values() + 1e-9;
    EXPECT_LE(p.predicted_ms, p.traversals_ms + tol);
    EXPECT_LE(p.predicted_ms, predict_step_ms(g, costs, amp) + tol);
    EXPECT_LE(p.predicted_ms,
              predict_step_ms(g, costs, std::vector<char>(size_t(g.num_nodes()), 0)) + tol);
    EXPECT_NEAR(p.predicted_ms, predict_step_ms(g, costs, p.low), 1e-9);
    for (NodeId i = 0; i < g.num_nodes(); ++i) {
      const AmpList l = lists.classify(g.node(i).kind);
      if (l == AmpList::deny || l == AmpList::fp32)
        EXPECT_FALSE(p.low[size_t(i)]) << g.node(i).name;
      const bool free = l == AmpList::allow || l == AmpList::infer || l == AmpList::clear;
      if (!free || p.decided_by[size_t(i)] == Traversal::deny) continue;
      std::vector<char> flipped = p.low;
      flipped[size_t(i)] ^= 1;
      EXPECT_GE(predict_step_ms(g, costs, flipped), p.predicted_ms - tol) << g.node(i).name;
    }
  }
}

// Folded casts cost nothing: in LeNet's amp plan the only low -> f32 casts that folding
// removes are the two bf16 Conv2DBackpropFilter results read by ApplyMomentum.
TEST(CostAwareTest, FoldedWeightGradientCastsCostNothing) {
  VariableStore vars(0, default_cpu_backend());
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 0.5});
  costs.cast = {0.0, 0.0};  // casts to bf16 (those of weights fold too) are free here
  costs.cast_to_f32 = CastCostModel{0.25, 0.0};  // every cast back: 0.25 ms
  const std::vector<char> amp = paint_amp(g, AmpLists::defaults(Device::cpu, DType::bf16));
  EXPECT_NEAR(predict_step_ms(g, costs, amp) - predict_step_ms(g, costs, amp, true), 2 * 0.25,
              1e-9);
  // The search prices them the same way: with folding, its plan is predicted cheaper.
  const CostAwarePlan folded =
      plan_cost_aware(g, AmpLists::defaults(Device::cpu, DType::bf16), costs, {.fold_casts = true});
  const CostAwarePlan plain = plan_cost_aware(g, AmpLists::defaults(Device::cpu, DType::bf16), costs);
  EXPECT_NEAR(folded.predicted_ms, predict_step_ms(g, costs, folded.low, true), 1e-9);
  EXPECT_LE(folded.predicted_ms, plain.predicted_ms - 2 * 0.25 + 1e-6);
}

// Weight casts fold into the optimizer updates (weight copies) and cost nothing either:
// in LeNet's amp plan, the nine casts of updated variables to bf16 (apply_precision makes
// exactly those weight copies).
TEST(CostAwareTest, WeightCopiesCostNothing) {
  VariableStore vars(0, default_cpu_backend());
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 0.5});
  costs.cast = {0.125, 0.0};  // every cast to bf16: 0.125 ms
  costs.cast_to_f32 = CastCostModel{0.0, 0.0};
  const std::vector<char> amp = paint_amp(g, AmpLists::defaults(Device::cpu, DType::bf16));
  Graph painted = g;
  const CastStats copies = apply_precision(painted, amp, DType::bf16, true);
  ASSERT_EQ(copies.weight_copies, 9);
  EXPECT_NEAR(predict_step_ms(g, costs, amp) - predict_step_ms(g, costs, amp, true),
              copies.weight_copies * 0.125, 1e-9);
  const CostAwarePlan folded =
      plan_cost_aware(g, AmpLists::defaults(Device::cpu, DType::bf16), costs, {.fold_casts = true});
  EXPECT_NEAR(folded.predicted_ms, predict_step_ms(g, costs, folded.low, true), 1e-9);
}

}  // namespace
}  // namespace campo
