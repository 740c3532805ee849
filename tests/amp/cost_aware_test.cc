// The cost-aware traversals on hand-built graphs with a fixed, hand-written cost table, so
// every decision is known in advance (on LeNet's whole training graph: tests/train/
// cost_aware_training_test.cc).
#include "amp/cost_aware.h"

#include <gtest/gtest.h>

#include "amp/min_cut.h"
#include "amp/policy.h"
#include "graph/builder.h"
#include "runtime/rng.h"

namespace campo {
namespace {

constexpr CostAwareOptions kTraversals{CostAwareSearch::traversals};

struct Fixture {
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
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
  f.set(m, 1.0, 0.9);         // saves 0.1 ms ...
  f.costs.cast = {0.1, 0.0};  // ... but needs three casts of 0.1 ms (x, w, m)
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals);
  EXPECT_FALSE(p.low[size_t(f.node_of(m))]);
  f.set(m, 1.0, 0.5);  // saves 0.5 ms > 0.3 ms of casts
  p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals);
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
  EXPECT_FALSE(
      plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals).low[size_t(f.node_of(m))]);
  // ... and with a cheap way back (0.2 + 0.02 ms) a gain.
  f.costs.cast_to_f32 = CastCostModel{0.02, 0.0};
  EXPECT_TRUE(
      plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals).low[size_t(f.node_of(m))]);
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
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals);
  EXPECT_FALSE(p.low[size_t(f.node_of(a))]);
  // With both low, x and w are cast once each: the second MatMul pays only its output.
  std::vector<char> both = p.low;
  both[size_t(f.node_of(a))] = both[size_t(f.node_of(c))] = 1;
  EXPECT_NEAR(predict_step_ms(f.g, f.costs, both), 0.75 * 2 + 1.0 + 1.0 + 4 * 0.1, 1e-9);
  // The exact search sees the pair, and the Add after it: all three low, one cast (the
  // Add's result, for the Sum) instead of two: 3.8 ms instead of 4.0.
  p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, {});
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
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals);
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
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals);
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
    CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals);
    ASSERT_TRUE(p.low[size_t(f.node_of(c))]);
    // Casting 512 elements instead of 128 after the chain: 384 * per_element saved vs
    // 0.02 ms more for the two clear ops.
    const bool pays = 384 * per_element > 0.02;
    EXPECT_EQ(bool(p.low[size_t(f.node_of(r))]), pays) << per_element;
    EXPECT_EQ(bool(p.low[size_t(f.node_of(pool))]), pays) << per_element;
    if (pays) EXPECT_EQ(p.decided_by[size_t(f.node_of(pool))], Traversal::clear_chain);
  }
}

// Every piece of a low-precision SplitV is low precision (as output 0 of any node): feeding
// a low consumer from its second piece costs no cast.
TEST(CostAwareTest, EverySplitVPieceRunsInTheNodesPrecision) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m = f.b.matmul(x, f.var("w", {8, 8}));
  std::vector<ValueId> pieces = f.b.op_multi(OpKind::SplitV, {m}, SplitAttrs{1, {4, 4}});
  ValueId ma = f.b.matmul(pieces[0], f.var("wa", {4, 4}));
  ValueId mb = f.b.matmul(pieces[1], f.var("wb", {4, 4}));
  ValueId s = f.b.add(ma, mb);
  f.b.sum(s);
  f.uniform_costs(1.0, 1.0);
  f.costs.cast = {0.1, 0.0};
  std::vector<char> low(size_t(f.g.num_nodes()), 0);
  for (ValueId v : {m, pieces[0], ma, mb, s}) low[size_t(f.node_of(v))] = 1;
  // 6 kernel nodes at 1 ms; casts of x, w, wa, wb into low and of s back for the Sum.
  EXPECT_NEAR(predict_step_ms(f.g, f.costs, low), 6.0 + 5 * 0.1, 1e-9);
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
    struct Term {
      int a, b;
      double c;
    };
    std::vector<std::pair<double, double>> unary(size_t(n), {0.0, 0.0});
    std::vector<Term> pairs;
    auto lit = [&](int k) {
      return k < n ? x[size_t(k)] : k == n ? BinaryCut::zero() : BinaryCut::one();
    };
    auto value = [&](int k, unsigned bits) {
      return k < n ? int((bits >> k) & 1) : k == n ? 0 : 1;
    };
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
      for (int i = 0; i < n; ++i)
        e += (bits >> i) & 1 ? unary[size_t(i)].second : unary[size_t(i)].first;
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
  CostAwarePlan trav = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs, kTraversals);
  EXPECT_FALSE(trav.low[size_t(f.node_of(m1))]);
  EXPECT_FALSE(trav.low[size_t(f.node_of(m2))]);
  CostAwarePlan p = plan_cost_aware(f.g, AmpLists::defaults(Device::cpu, DType::bf16), f.costs);  // exact: the default
  for (ValueId v : {m1, t, m2}) EXPECT_TRUE(p.low[size_t(f.node_of(v))]);
  EXPECT_EQ(p.decided_by[size_t(f.node_of(t))], Traversal::exact);
  // x, w1, w2 into low, m2 back to f32 for the Sum (deny): 4 casts.
  EXPECT_NEAR(p.predicted_ms, 0.6 + 0.9 + 0.6 + 1.0 /*Sum, f32*/ + 4 * 0.15, 1e-9);
  EXPECT_LT(p.predicted_ms, trav.predicted_ms);
}

}  // namespace
}  // namespace campo
