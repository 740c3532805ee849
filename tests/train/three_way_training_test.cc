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
#include "train/training_graph.h"

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

// --low-precision auto through a training session: costs that make LeNet's convolutions
// fastest in f16 and its GEMMs in bf16 give one graph with both types (a value passed
// between them cast through f32), which trains under dynamic loss scaling with losses near
// the fp32 session's on the same batches.
TEST(ThreeWayTest, AutoTrainsLeNetWithF16AndBf16Nodes) {
  const Shape image = {1, 28, 28};
  const int64_t batch = 8;
  PrecisionOptions options;
  options.low_precision = "auto";
  PrecisionConfig p = precision_config(Precision::cost_aware, options, Device::cpu);
  ASSERT_TRUE(p.scaler.enabled) << "auto may choose f16: dynamic loss scaling";
  p.padding = false;  // no timing in a test of the plan
  // The graph the session plans (node ids as its graph before casts): fp32, same scaling.
  Graph g32;
  VariableStore v32(7, default_cpu_backend());
  TrainingGraphSpec spec{"lenet", ModelOptions{}, image, batch, OptimizerConfig{}, p};
  spec.precision.policy = Precision::fp32;
  build_training_graph(g32, v32, spec);
  CostTable bf16, f16;
  for (NodeId i = 0; i < g32.num_nodes(); ++i) {
    const OpKind k = g32.node(i).kind;
    const bool conv = k == OpKind::Conv2D || k == OpKind::Conv2DBackpropInput ||
                      k == OpKind::Conv2DBackpropFilter;
    f16.nodes.push_back({1.0, conv ? 0.1 : 2.0});
    bf16.nodes.push_back({1.0, k == OpKind::MatMul ? 0.1 : 2.0});
  }
  f16.cast = bf16.cast = {0.001, 1e-7};
  p.costs = std::make_shared<const CostTable>(bf16);
  p.f16_costs = std::make_shared<const CostTable>(f16);

  TrainingSession mixed("lenet", ModelOptions{}, image, batch, OptimizerConfig{}, 7,
                        default_cpu_backend(), p);
  TrainingSession fp32("lenet", ModelOptions{}, image, batch, OptimizerConfig{}, 7,
                       default_cpu_backend());
  const PrecisionSummary s = mixed.precision_summary();
  EXPECT_GT(s.f16_nodes, 0);
  EXPECT_GT(s.low_nodes - s.f16_nodes, 0);
  Rng rng(3);
  for (int step = 0; step < 5; ++step) {
    Batch b;
    b.images = Tensor::empty({batch, 1, 28, 28}, DType::f32);
    b.labels = Tensor::empty({batch}, DType::i32);
    for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data_as<float>()[i] = rng.normal();
    for (int64_t i = 0; i < batch; ++i) b.labels.data_as<int32_t>()[i] = int32_t(rng.below(10));
    const float want = fp32.train_step(b, 0.01f);
    const float got = mixed.train_step(b, 0.01f);
    ASSERT_TRUE(std::isfinite(got)) << "step " << step;
    EXPECT_NEAR(got, want, 0.03 * want) << "step " << step;
  }
  EXPECT_EQ(mixed.scaler().skipped_steps(), 0);
}

}  // namespace
}  // namespace campo
