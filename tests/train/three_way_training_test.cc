// The three-way search (amp/three_way.h) on LeNet's and ResNet-18's whole training graphs
// (train/trainer.h builds them): restricted to {f32, f16} or {f32, bf16} it gives the binary
// exact search's plan and predicted time (amp/cost_aware.h), with and without folded casts;
// auto is never worse than the plans within its choices, and keeps ops that need range out of
// f16.
#include <gtest/gtest.h>

#include "amp/cost_aware.h"
#include "amp/three_way.h"
#include "runtime/rng.h"
#include "train/trainer.h"

namespace campo {
namespace {

Graph training_graph(VariableStore& vars, const std::string& model, Shape image) {
  Graph g;
  TrainingGraphSpec spec;
  spec.model = model;
  spec.image_shape = std::move(image);
  spec.batch = 2;
  build_training_graph(g, vars, spec);
  return g;
}

void expect_binary_plans_unchanged(const Graph& g, uint64_t seed, int trials) {
  const AmpLists f16_lists = AmpLists::defaults(Device::cpu, DType::f16);
  const AmpLists bf16_lists = AmpLists::defaults(Device::cpu, DType::bf16);
  Rng rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    ThreeWayCostTable three;
    CostTable half, brain;  // the binary search's tables for f16 and for bf16
    for (NodeId i = 0; i < g.num_nodes(); ++i) {
      const NodeCost3 c{0.5 + rng.uniform(), 0.3 + rng.uniform(), 0.3 + rng.uniform()};
      three.nodes.push_back(c);
      half.nodes.push_back({c.f32_ms, c.f16_ms});
      brain.nodes.push_back({c.f32_ms, c.bf16_ms});
    }
    auto model = [&] { return CastCostModel{0.2 * rng.uniform(), 1e-4 * rng.uniform()}; };
    three.casts = {model(), model(), model(), model()};
    half.cast = three.casts.f32_to_f16;
    half.cast_to_f32 = three.casts.f16_to_f32;
    brain.cast = three.casts.f32_to_bf16;
    brain.cast_to_f32 = three.casts.bf16_to_f32;
    for (bool fold : {false, true}) {
      SCOPED_TRACE("trial " + std::to_string(trial) + (fold ? ", folded casts" : ""));
      const CostAwarePlan bin16 = plan_cost_aware(g, f16_lists, half, {.fold_casts = fold});
      const CostAwarePlan bin_b = plan_cost_aware(g, bf16_lists, brain, {.fold_casts = fold});
      const ThreeWayPlan tw16 =
          plan_three_way(g, f16_lists, bf16_lists, three, {LowPrecisionMode::fp16, fold});
      const ThreeWayPlan tw_b =
          plan_three_way(g, f16_lists, bf16_lists, three, {LowPrecisionMode::bf16, fold});
      const ThreeWayPlan tw =
          plan_three_way(g, f16_lists, bf16_lists, three, {LowPrecisionMode::automatic, fold});
      for (NodeId i = 0; i < g.num_nodes(); ++i) {
        EXPECT_EQ(tw16.dtype[size_t(i)] == DType::f16, bool(bin16.low[size_t(i)]))
            << g.node(i).name;
        EXPECT_EQ(tw_b.dtype[size_t(i)] == DType::bf16, bool(bin_b.low[size_t(i)]))
            << g.node(i).name;
        if (needs_range(g.node(i).kind))
          EXPECT_NE(tw.dtype[size_t(i)], DType::f16) << g.node(i).name;
      }
      EXPECT_EQ(tw16.bf16_nodes, 0);
      EXPECT_EQ(tw_b.f16_nodes, 0);
      EXPECT_NEAR(tw16.predicted_ms, bin16.predicted_ms, 1e-9);
      EXPECT_NEAR(tw_b.predicted_ms, bin_b.predicted_ms, 1e-9);
      EXPECT_EQ(tw.needs_loss_scaling, tw.f16_nodes > 0);
      // auto is never worse than bf16, nor than fp16 kept off the ops that need range (the
      // plans within its choices). Without folding only: the search folds a cast only where
      // no reader may leave f32, and auto gives more readers that choice.
      if (fold) continue;
      std::vector<uint8_t> f16_in_range =
          allowed_types(g, f16_lists, bf16_lists, LowPrecisionMode::fp16);
      for (NodeId i = 0; i < g.num_nodes(); ++i)
        if (needs_range(g.node(i).kind)) f16_in_range[size_t(i)] &= uint8_t(~kAllowF16);
      const double tol = kCastTieBreakMs * 4 * g.num_values();
      EXPECT_LE(tw.predicted_ms, tw_b.predicted_ms + tol);
      EXPECT_LE(tw.predicted_ms, minimize_three_way(g, three, f16_in_range).predicted_ms + tol);
    }
  }
}

TEST(ThreeWayTest, RestrictedToOneLowTypeIsTheBinarySearchOnLeNet) {
  VariableStore vars(0, default_cpu_backend());
  expect_binary_plans_unchanged(training_graph(vars, "lenet", {1, 28, 28}), 11, 4);
}

TEST(ThreeWayTest, RestrictedToOneLowTypeIsTheBinarySearchOnResNet18) {
  VariableStore vars(0, default_cpu_backend());
  expect_binary_plans_unchanged(training_graph(vars, "resnet18", {3, 32, 32}), 12, 2);
}

}  // namespace
}  // namespace campo
