// The cost-aware traversals on hand-built graphs with a fixed, hand-written cost table, so
// every decision is known in advance.
#include "amp/cost_aware.h"

#include <gtest/gtest.h>

#include "amp/min_cut.h"
#include "amp/policy.h"
#include "runtime/rng.h"
#include "graph/builder.h"
#include "train/training_graph.h"

namespace campo {
namespace {

constexpr CostAwareOptions kTraversals{CostAwareSearch::traversals};

struct Fixture {
  Graph g;
  VariableStore vars;
  Builder b{g, vars};
  CostTable costs;
  ValueId var(const std::string& name, Shape s) {
    return b.variable_exact(name, s, Init::ones(), VariableKind::parameter);
  }
  NodeId node_of(ValueId v) const { return g.value(v).producer; }
  // Every node costs `fp32` in f32 and `low` in low precision unless set otherwise.
  void uniform_costs(double fp32, double low) {
    costs.nodes.assign(size_t(g.num_nodes()), NodeCost{fp32, low});
  }
  void set(ValueId v, double fp32, double low) { costs.nodes[size_t(node_of(v))] = {fp32, low}; }
};

TEST(CastModelTest, RecoversKnownCoefficients) {
  std::vector<std::pair<int64_t, double>> samples;
  for (int64_t n : {1000, 5000, 20000, 100000, 400000})
    samples.push_back({n, 0.05 + 2e-6 * double(n)});
  CastCostModel m = fit_cast_model(samples);
  EXPECT_NEAR(m.fixed_ms, 0.05, 1e-9);
  EXPECT_NEAR(m.per_element_ms, 2e-6, 1e-12);
  EXPECT_THROW(fit_cast_model({{10, 1.0}}), Error);
  EXPECT_THROW(fit_cast_model({{10, 1.0}, {10, 2.0}}), Error);
}

TEST(CostAwareTest, AllowOpThatDoesNotPayStaysF32) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m = f.b.matmul(x, f.var("w", {8, 8}));
  f.b.sum(m);
  f.uniform_costs(1.0, 1.0);
  f.set(m, 1.0, 0.9);                 // saves 0.1 ms ...
  f.costs.cast = {0.1, 0.0};          // ... but needs three casts of 0.1 ms (x, w, m)
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals);
  EXPECT_FALSE(p.low[size_t(f.node_of(m))]);
  f.set(m, 1.0, 0.5);                 // saves 0.5 ms > 0.3 ms of casts
  p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals);
  EXPECT_TRUE(p.low[size_t(f.node_of(m))]);
  EXPECT_EQ(p.decided_by[size_t(f.node_of(m))], Traversal::allow);
  EXPECT_NEAR(p.predicted_ms, 0.5 + 1.0 /*Sum*/ + 0.3, 1e-9);
}

// Casts into the low precision and back can cost differently (they do on CPUs): the two
// input casts (x, w) are f32 -> low, the output cast (m for the Sum) low -> f32.
TEST(CostAwareTest, CastDirectionsArePricedSeparately) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m = f.b.matmul(x, f.var("w", {8, 8}));
  f.b.sum(m);
  f.uniform_costs(1.0, 1.0);
  f.set(m, 1.0, 0.5);
  f.costs.cast = {0.1, 0.0};
  f.costs.cast_to_f32 = CastCostModel{0.02, 0.0};
  std::vector<char> low(size_t(f.g.num_nodes()), 0);
  low[size_t(f.node_of(m))] = 1;
  EXPECT_NEAR(predict_step_ms(f.g, f.costs, low), 0.5 + 1.0 + 2 * 0.1 + 0.02, 1e-9);
  // Cheaper way back tips the decision: 0.5 ms saved vs 0.2 + 0.4 ms of casts is a loss...
  f.costs.cast_to_f32 = CastCostModel{0.4, 0.0};
  EXPECT_FALSE(plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals).low[size_t(f.node_of(m))]);
  // ... and with a cheap way back (0.2 + 0.02 ms) a gain.
  f.costs.cast_to_f32 = CastCostModel{0.02, 0.0};
  EXPECT_TRUE(plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals).low[size_t(f.node_of(m))]);
}

TEST(CostAwareTest, SharedWeightCastIsPaidOnce) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId w = f.var("w", {8, 8});
  ValueId a = f.b.matmul(x, w);
  ValueId c = f.b.matmul(x, w, false, true);
  ValueId ac = f.b.add(a, c);
  f.b.sum(ac);
  f.uniform_costs(1.0, 1.0);
  f.set(a, 1.0, 0.75);
  f.set(c, 1.0, 0.75);
  f.costs.cast = {0.1, 0.0};
  // The first MatMul alone: saves 0.25, pays x, w and its output: 0.3 -> stays f32.
  // Deciding in data-flow order, it does not pay; the second one neither (same costs).
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals);
  EXPECT_FALSE(p.low[size_t(f.node_of(a))]);
  // With both low, x and w are cast once each: the second MatMul pays only its output.
  std::vector<char> both = p.low;
  both[size_t(f.node_of(a))] = both[size_t(f.node_of(c))] = 1;
  EXPECT_NEAR(predict_step_ms(f.g, f.costs, both), 0.75 * 2 + 1.0 + 1.0 + 4 * 0.1, 1e-9);
  // The exact search sees the pair, and the Add after it: all three low, one cast (the
  // Add's result, for the Sum) instead of two: 3.8 ms instead of 4.0.
  p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, {});
  for (ValueId v : {a, c, ac}) EXPECT_TRUE(p.low[size_t(f.node_of(v))]);
  EXPECT_EQ(p.decided_by[size_t(f.node_of(a))], Traversal::exact);
  EXPECT_EQ(p.exact_changes, 3);
  EXPECT_NEAR(p.traversals_ms, 4.0, 1e-9);
  EXPECT_NEAR(p.predicted_ms, 0.75 * 2 + 1.0 + 1.0 + 3 * 0.1, 1e-9);
}

TEST(CostAwareTest, DenyPropagatesThroughInferOps) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId a = f.b.matmul(x, f.var("w1", {8, 8}));
  ValueId mean = f.b.mean(a, {1});
  ValueId scaled = f.b.mul(a, mean);  // infer, downstream of a deny op
  ValueId o = f.b.matmul(scaled, f.var("w2", {8, 8}));
  f.b.sum(o);
  f.uniform_costs(1.0, 0.0);  // low precision is free everywhere
  f.costs.cast = {0.0, 0.0};
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals);
  EXPECT_TRUE(p.low[size_t(f.node_of(a))]);
  EXPECT_TRUE(p.low[size_t(f.node_of(o))]);
  EXPECT_FALSE(p.low[size_t(f.node_of(scaled))]);
  EXPECT_EQ(p.decided_by[size_t(f.node_of(scaled))], Traversal::deny);
  EXPECT_EQ(p.decided_by[size_t(f.node_of(mean))], Traversal::deny);
}

TEST(CostAwareTest, ClearOpBetweenLowNeighboursIsAdopted) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m1 = f.b.matmul(x, f.var("w1", {8, 8}));
  ValueId r = f.b.relu(m1);
  ValueId m2 = f.b.matmul(r, f.var("w2", {8, 8}));
  f.b.sum(m2);
  f.uniform_costs(1.0, 1.0);  // Relu and Sum cost the same in both precisions
  f.set(m1, 10.0, 1.0);
  f.set(m2, 10.0, 1.0);
  f.costs.cast = {0.5, 0.0};
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals);
  EXPECT_TRUE(p.low[size_t(f.node_of(m1))]);
  EXPECT_TRUE(p.low[size_t(f.node_of(m2))]);
  EXPECT_TRUE(p.low[size_t(f.node_of(r))]);  // removes two boundary casts
  EXPECT_EQ(p.decided_by[size_t(f.node_of(r))], Traversal::neighbour);
}

TEST(CostAwareTest, ClearChainAdoptedOnlyWhenItPays) {
  // MatMul (low) -> Relu -> MaxPool -> Sum (deny). Adopting Relu alone only moves the cast
  // (same size) and costs a little; the chain Relu+MaxPool moves the cast past the pooling,
  // to a tensor 4x smaller.
  for (double per_element : {1e-3, 1e-6}) {
    Fixture f;
    ValueId x = f.b.placeholder("x", {2, 4, 8, 8});
    ValueId w = f.var("w", {4, 4, 1, 1});
    ConvAttrs a;
    ValueId c = f.b.conv2d(x, w, a);
    ValueId r = f.b.relu(c);
    ValueId pool = f.b.max_pool(r, 2, 2);
    f.b.sum(pool);
    f.uniform_costs(1.0, 1.01);
    f.set(c, 100.0, 1.0);
    f.costs.cast = {0.0, per_element};
    CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals);
    ASSERT_TRUE(p.low[size_t(f.node_of(c))]);
    // Casting 512 elements instead of 128 after the chain: 384 * per_element saved vs
    // 0.02 ms more for the two clear ops.
    const bool pays = 384 * per_element > 0.02;
    EXPECT_EQ(bool(p.low[size_t(f.node_of(r))]), pays) << per_element;
    EXPECT_EQ(bool(p.low[size_t(f.node_of(pool))]), pays) << per_element;
    if (pays) EXPECT_EQ(p.decided_by[size_t(f.node_of(pool))], Traversal::clear_chain);
  }
}

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
  VariableStore vars;
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 2.0});
  costs.cast = {0.01, 1e-6};
  CostAwarePlan p = plan_cost_aware(g, AmpLists::defaults(), costs, kTraversals);
  for (NodeId i = 0; i < g.num_nodes(); ++i) EXPECT_FALSE(p.low[size_t(i)]) << g.node(i).name;
}

TEST(CostAwareTest, LowPaysOnAllowOpsGivesAmpsAllowAndDenyDecisionsAtNoMoreCost) {
  VariableStore vars;
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 1.0});
  AmpLists lists = AmpLists::defaults();
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

// ---- the exact search ----

// Every assignment of a few variables, against the cut.
TEST(BinaryCutTest, MatchesBruteForceOnRandomTerms) {
  Rng rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng.below(9));
    BinaryCut cut;
    std::vector<BinaryCut::Lit> x;
    for (int i = 0; i < n; ++i) x.push_back(cut.new_var());
    struct Term { int a, b; double c; };
    std::vector<std::pair<double, double>> unary(size_t(n), {0.0, 0.0});
    std::vector<Term> pairs;
    auto lit = [&](int k) { return k < n ? x[size_t(k)] : k == n ? BinaryCut::zero() : BinaryCut::one(); };
    auto value = [&](int k, unsigned bits) { return k < n ? int((bits >> k) & 1) : k == n ? 0 : 1; };
    for (int i = 0; i < n; ++i) {
      const double e0 = rng.uniform() * 4 - 2, e1 = rng.uniform() * 4 - 2;
      unary[size_t(i)] = {e0, e1};
      cut.add_unary(x[size_t(i)], e0, e1);
    }
    const int m = int(rng.below(uint64_t(3 * n + 1)));
    for (int k = 0; k < m; ++k) {  // operands may be constants (n: 0, n + 1: 1)
      const int a = int(rng.below(uint64_t(n + 2))), b = int(rng.below(uint64_t(n + 2)));
      const double c = rng.below(10) == 0 ? BinaryCut::infinity() : rng.uniform() * 3;
      pairs.push_back({a, b, c});
      cut.add_if_0_1(lit(a), lit(b), c);
    }
    double best = 1e308;
    for (unsigned bits = 0; bits < (1u << n); ++bits) {
      double e = 0;
      for (int i = 0; i < n; ++i) e += (bits >> i) & 1 ? unary[size_t(i)].second : unary[size_t(i)].first;
      for (const Term& t : pairs)
        if (value(t.a, bits) == 0 && value(t.b, bits) == 1) e += t.c;
      best = std::min(best, e);
    }
    double got = 0;
    const std::vector<char> labels = cut.minimize(&got);
    ASSERT_EQ(int(labels.size()), n);
    EXPECT_NEAR(got, best, 1e-9 * (1 + std::abs(best))) << "trial " << trial;
  }
}

// Two allow ops that pay only together: deciding one at a time (traversal 1) keeps both
// f32; the exact search makes them, and the infer op between them, low.
TEST(CostAwareTest, ExactSearchFindsAssignmentsTheTraversalsMiss) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m1 = f.b.matmul(x, f.var("w1", {8, 8}));
  ValueId t = f.b.tanh(m1);  // infer
  ValueId m2 = f.b.matmul(t, f.var("w2", {8, 8}));
  f.b.sum(m2);
  f.uniform_costs(1.0, 0.9);
  f.set(m1, 1.0, 0.6);
  f.set(m2, 1.0, 0.6);
  f.costs.cast = {0.15, 0.0};  // one MatMul alone: 0.6 + 3 casts = 1.05 > 1.0
  CostAwarePlan trav = plan_cost_aware(f.g, AmpLists::defaults(), f.costs, kTraversals);
  EXPECT_FALSE(trav.low[size_t(f.node_of(m1))]);
  EXPECT_FALSE(trav.low[size_t(f.node_of(m2))]);
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(), f.costs);  // exact: the default
  for (ValueId v : {m1, t, m2}) EXPECT_TRUE(p.low[size_t(f.node_of(v))]);
  EXPECT_EQ(p.decided_by[size_t(f.node_of(t))], Traversal::exact);
  // x, w1, w2 into low, m2 back to f32 for the Sum (deny): 4 casts.
  EXPECT_NEAR(p.predicted_ms, 0.6 + 0.9 + 0.6 + 1.0 /*Sum, f32*/ + 4 * 0.15, 1e-9);
  EXPECT_LT(p.predicted_ms, trav.predicted_ms);
}

// On LeNet's whole training graph with random costs: never worse than the traversals, the
// amp plan or all-f32; and no single flip of a free node improves it (a local check of
// optimality on a graph too large to enumerate).
TEST(CostAwareTest, ExactSearchIsNoWorseThanAnyOtherPlan) {
  VariableStore vars;
  Graph g = lenet_training_graph(vars);
  const AmpLists lists = AmpLists::defaults();
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
    EXPECT_LE(p.predicted_ms, predict_step_ms(g, costs, std::vector<char>(size_t(g.num_nodes()), 0)) + tol);
    EXPECT_NEAR(p.predicted_ms, predict_step_ms(g, costs, p.low), 1e-9);
    for (NodeId i = 0; i < g.num_nodes(); ++i) {
      const AmpList l = lists.classify(g.node(i).kind);
      if (l == AmpList::deny || l == AmpList::fp32) EXPECT_FALSE(p.low[size_t(i)]) << g.node(i).name;
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
  VariableStore vars;
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 0.5});
  costs.cast = {0.0, 0.0};  // casts to bf16 (those of weights fold too) are free here
  costs.cast_to_f32 = CastCostModel{0.25, 0.0};  // every cast back: 0.25 ms
  const std::vector<char> amp = paint_amp(g, AmpLists::defaults());
  EXPECT_NEAR(predict_step_ms(g, costs, amp) - predict_step_ms(g, costs, amp, true), 2 * 0.25, 1e-9);
  // The search prices them the same way: with folding, its plan is predicted cheaper.
  const CostAwarePlan folded = plan_cost_aware(g, AmpLists::defaults(), costs, {.fold_casts = true});
  const CostAwarePlan plain = plan_cost_aware(g, AmpLists::defaults(), costs);
  EXPECT_NEAR(folded.predicted_ms, predict_step_ms(g, costs, folded.low, true), 1e-9);
  EXPECT_LE(folded.predicted_ms, plain.predicted_ms - 2 * 0.25 + 1e-6);
}

// Weight casts fold into the optimizer updates (weight copies) and cost nothing either:
// in LeNet's amp plan, the nine casts of updated variables to bf16 (apply_precision makes
// exactly those weight copies).
TEST(CostAwareTest, WeightCopiesCostNothing) {
  VariableStore vars;
  Graph g = lenet_training_graph(vars);
  CostTable costs;
  costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 0.5});
  costs.cast = {0.125, 0.0};  // every cast to bf16: 0.125 ms
  costs.cast_to_f32 = CastCostModel{0.0, 0.0};
  const std::vector<char> amp = paint_amp(g, AmpLists::defaults());
  Graph painted = g;
  const CastStats copies = apply_precision(painted, amp, DType::bf16, true);
  ASSERT_EQ(copies.weight_copies, 9);
  EXPECT_NEAR(predict_step_ms(g, costs, amp) - predict_step_ms(g, costs, amp, true),
              copies.weight_copies * 0.125, 1e-9);
  const CostAwarePlan folded = plan_cost_aware(g, AmpLists::defaults(), costs, {.fold_casts = true});
  EXPECT_NEAR(folded.predicted_ms, predict_step_ms(g, costs, folded.low, true), 1e-9);
}

}  // namespace
}  // namespace campo
