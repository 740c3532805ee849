// The three-way search (f32 / f16 / bf16 per node): its cast pricing by hand, the exact
// minimiser against every assignment of random small graphs, and two hand-built chains
// where mixing f16 and bf16 pays and where it does not. Against the binary search on whole
// training graphs: tests/train/three_way_training_test.cc.
#include "amp/three_way.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "graph/builder.h"
#include "runtime/rng.h"

namespace campo {
namespace {

struct Fixture {
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
  Builder b{g, vars};
  ValueId var(const std::string& name, Shape s) {
    return b.variable_exact(name, s, Init::ones(), VariableKind::parameter);
  }
  NodeId node_of(ValueId v) const { return g.value(v).producer; }
};

CastCostModel fixed(double ms) { return {ms, 0.0}; }

// A value made in f16 and read in f32 and bf16: f16 -> f32 once, then f32 -> bf16 from
// that same f32 copy (f16 <-> bf16 goes through f32).
TEST(ThreeWayTest, CrossCastGoesThroughTheSharedF32Copy) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m = f.b.matmul(x, f.var("w", {8, 8}));
  ValueId t = f.b.tanh(m);  // reads m in bf16
  ValueId r = f.b.relu(m);  // reads m in f32
  f.b.sum(f.b.add(t, r));
  ThreeWayCostTable costs;
  costs.nodes.assign(size_t(f.g.num_nodes()), NodeCost3{1.0, 1.0, 1.0});
  costs.casts = {fixed(0.1), fixed(0.2), fixed(0.4), fixed(0.8)};  // 32->16, 16->32, 32->b, b->32
  std::vector<DType> dtype(size_t(f.g.num_nodes()), DType::f32);
  dtype[size_t(f.node_of(m))] = DType::f16;
  dtype[size_t(f.node_of(t))] = DType::bf16;
  // Five kernels (MatMul, Tanh, Relu, Add, Sum) at 1 ms; x and w into f16 (2 x 0.1), m to
  // f32 (0.2) and from that copy to bf16 (0.4), t back to f32 for the Add (0.8).
  EXPECT_NEAR(predict_step_ms(f.g, costs, dtype), 5.0 + 0.2 + 0.2 + 0.4 + 0.8, 1e-12);
  // Both readers bf16: the same two casts of m, and r back to f32 too.
  dtype[size_t(f.node_of(r))] = DType::bf16;
  EXPECT_NEAR(predict_step_ms(f.g, costs, dtype), 5.0 + 0.2 + 0.2 + 0.4 + 2 * 0.8, 1e-12);
  // A bf16 value read in f16: bf16 -> f32 -> f16.
  std::fill(dtype.begin(), dtype.end(), DType::f32);
  dtype[size_t(f.node_of(m))] = DType::bf16;
  dtype[size_t(f.node_of(t))] = DType::f16;
  EXPECT_NEAR(predict_step_ms(f.g, costs, dtype),
              5.0 + 2 * 0.4 /*x, w*/ + 0.8 /*m to f32, for r and for f16*/ + 0.1 /*to f16*/ +
                  0.2 /*t back*/,
              1e-12);
}

// A graph of MatMul / Tanh / Relu / Add / Mul / LayerNorm (whose scale and offset slots stay
// f32) over [4, 8] values, each input drawn from every value made so far (so values fan out to
// readers of several types), and a Sum of one or two of them (f32 only).
struct RandomGraph {
  Fixture f;
  std::vector<NodeId> ops;  // the free nodes
  RandomGraph(Rng& rng, int num_ops) {
    std::vector<ValueId> pool = {f.b.placeholder("x", {4, 8})};
    auto pick = [&] { return pool[size_t(rng.below(uint64_t(pool.size())))]; };
    for (int k = 0; k < num_ops; ++k) {
      const std::string id = std::to_string(k);
      ValueId out = kNoValue;
      switch (rng.below(6)) {
        case 0:
          out = f.b.matmul(pick(), f.var("w" + id, {8, 8}));
          break;
        case 1:
          out = f.b.tanh(pick());
          break;
        case 2:
          out = f.b.relu(pick());
          break;
        case 3:
          out = f.b.add(pick(), pick());
          break;
        case 4:
          out = f.b.mul(pick(), pick());
          break;
        default:
          out = f.b.layer_norm(pick(), f.var("s" + id, {8}), f.var("o" + id, {8}), 1e-5f);
      }
      ops.push_back(f.node_of(out));
      pool.push_back(out);
    }
    f.b.sum(pool.back());
    if (rng.below(2)) f.b.sum(pick());
  }
};

// Every assignment of up to 10 free nodes (3^10) against the cut, random costs and casts.
TEST(ThreeWayTest, MatchesBruteForceOnRandomGraphs) {
  Rng rng(26);
  int mixed_optima = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int num_ops = trial < 4 ? 10 : 1 + int(rng.below(8));
    RandomGraph rg(rng, num_ops);
    const Graph& g = rg.f.g;
    ThreeWayCostTable costs;
    std::vector<uint8_t> allowed(size_t(g.num_nodes()), kAllowF32);
    costs.nodes.assign(size_t(g.num_nodes()), NodeCost3{1.0, 1.0, 1.0});
    for (NodeId id : rg.ops) {
      NodeCost3& c = costs.nodes[size_t(id)];
      c = {0.5 + rng.uniform(), 0.2 + rng.uniform(), 0.2 + rng.uniform()};
      if (rng.below(10) == 0) c.f16_ms = kNoKernel;
      if (rng.below(10) == 0) c.bf16_ms = kNoKernel;
      const uint8_t masks[] = {kAllowF32 | kAllowF16 | kAllowBF16,
                               kAllowF32 | kAllowF16 | kAllowBF16,
                               kAllowF32 | kAllowF16,
                               kAllowF32 | kAllowBF16,
                               kAllowF16 | kAllowBF16,
                               kAllowF32,
                               kAllowBF16};
      allowed[size_t(id)] = masks[rng.below(7)];
      const bool runs = ((allowed[size_t(id)] & kAllowF16) && c.f16_ms < kNoKernel) ||
                        ((allowed[size_t(id)] & kAllowBF16) && c.bf16_ms < kNoKernel);
      if (!runs) allowed[size_t(id)] |= kAllowF32;
    }
    auto model = [&] { return CastCostModel{0.3 * rng.uniform(), 2e-3 * rng.uniform()}; };
    costs.casts = {model(), model(), model(), model()};

    // Brute force: every type of every free node, in base 3.
    std::vector<DType> dtype(size_t(g.num_nodes()), DType::f32), best_dtype;
    const DType types[] = {DType::f32, DType::f16, DType::bf16};
    const uint8_t bits[] = {kAllowF32, kAllowF16, kAllowBF16};
    double best = kNoKernel;
    int total = 1;
    for (size_t k = 0; k < rg.ops.size(); ++k) total *= 3;
    for (int code = 0; code < total; ++code) {
      bool ok = true;
      for (size_t k = 0, c = size_t(code); k < rg.ops.size(); ++k, c /= 3) {
        ok &= (allowed[size_t(rg.ops[k])] & bits[c % 3]) != 0;
        dtype[size_t(rg.ops[k])] = types[c % 3];
      }
      if (!ok) continue;
      const double ms = predict_step_ms(g, costs, dtype);
      if (ms < best) {
        best = ms;
        best_dtype = dtype;
      }
    }
    const ThreeWayPlan plan = minimize_three_way(g, costs, allowed);
    ASSERT_LT(best, kNoKernel);
    // Exact up to the tie-break (fewer casts win by at most kCastTieBreakMs per cast).
    EXPECT_GE(plan.predicted_ms, best - 1e-12) << "trial " << trial;
    EXPECT_LE(plan.predicted_ms, best + kCastTieBreakMs * 4 * g.num_values()) << "trial " << trial;
    EXPECT_NEAR(plan.predicted_ms, predict_step_ms(g, costs, plan.dtype), 1e-12);
    int f16 = 0, bf16 = 0;
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const DType t = plan.dtype[size_t(id)];
      EXPECT_TRUE(allowed[size_t(id)] & bits[t == DType::f32 ? 0 : t == DType::f16 ? 1 : 2]);
      f16 += t == DType::f16;
      bf16 += t == DType::bf16;
    }
    EXPECT_EQ(plan.f16_nodes, f16);
    EXPECT_EQ(plan.bf16_nodes, bf16);
    EXPECT_EQ(plan.needs_loss_scaling, f16 > 0);
    mixed_optima += f16 > 0 && bf16 > 0;
  }
  // The draw exercises plans that mix both low types, not only one of them.
  EXPECT_GE(mixed_optima, 10);
}

// x -> MatMul -> Softmax -> Sum. The MatMul is fast in f16, the Softmax needs range (no f16
// in auto mode) and is fast in bf16: with cheap casts the plan mixes them (f16 -> f32 -> bf16
// between them); with dear casts one type for both wins.
struct Chain {
  Fixture f;
  ValueId m, s, sum;
  ThreeWayCostTable costs;
  Chain(double cast_ms) {
    ValueId x = f.b.placeholder("x", {4, 8});
    m = f.b.matmul(x, f.var("w", {8, 8}));
    s = f.b.softmax(m);
    sum = f.b.sum(s);
    costs.nodes.assign(size_t(f.g.num_nodes()), NodeCost3{1.0, 1.0, 1.0});
    costs.nodes[size_t(f.node_of(m))] = {10.0, 2.0, 5.0};
    costs.nodes[size_t(f.node_of(s))] = {10.0, 1.0, 3.0};  // f16 would be fastest: not allowed
    costs.casts = {fixed(cast_ms), fixed(cast_ms), fixed(cast_ms), fixed(cast_ms)};
  }
  ThreeWayPlan plan(LowPrecisionMode mode) {
    return plan_three_way(f.g, AmpLists::defaults(Device::cpu, DType::f16),
                          AmpLists::defaults(Device::cpu, DType::bf16), costs, {mode});
  }
};

TEST(ThreeWayTest, MixingF16AndBf16PaysWithCheapCasts) {
  Chain c(0.1);
  const ThreeWayPlan p = c.plan(LowPrecisionMode::automatic);
  EXPECT_EQ(p.dtype[size_t(c.f.node_of(c.m))], DType::f16);
  EXPECT_EQ(p.dtype[size_t(c.f.node_of(c.s))], DType::bf16);
  EXPECT_EQ(p.dtype[size_t(c.f.node_of(c.sum))], DType::f32);  // deny
  EXPECT_TRUE(p.needs_loss_scaling);
  // x, w to f16; m to f32 then bf16; s back to f32 for the Sum: five casts.
  EXPECT_NEAR(p.predicted_ms, 2.0 + 3.0 + 1.0 + 5 * 0.1, 1e-9);
  // fp16 mode has no bf16 and the Softmax may run in f16 there (today's fp16 lists);
  // bf16 mode runs both in bf16.
  const ThreeWayPlan half = c.plan(LowPrecisionMode::fp16);
  EXPECT_EQ(half.dtype[size_t(c.f.node_of(c.s))], DType::f16);
  EXPECT_EQ(half.bf16_nodes, 0);
  const ThreeWayPlan brain = c.plan(LowPrecisionMode::bf16);
  EXPECT_EQ(brain.f16_nodes, 0);
  EXPECT_FALSE(brain.needs_loss_scaling);
  EXPECT_NEAR(brain.predicted_ms, 5.0 + 3.0 + 1.0 + 3 * 0.1, 1e-9);
}

TEST(ThreeWayTest, MixingDoesNotPayWithDearCasts) {
  Chain c(2.0);
  const ThreeWayPlan p = c.plan(LowPrecisionMode::automatic);
  // Mixed: 6 + 5 casts = 16; both bf16: 9 + 3 casts = 15; f16 MatMul, f32 Softmax: 19.
  EXPECT_EQ(p.dtype[size_t(c.f.node_of(c.m))], DType::bf16);
  EXPECT_EQ(p.dtype[size_t(c.f.node_of(c.s))], DType::bf16);
  EXPECT_FALSE(p.needs_loss_scaling);
  EXPECT_NEAR(p.predicted_ms, 15.0, 1e-9);
}

TEST(ThreeWayTest, AllowedTypesFollowListsModeAndRange) {
  Chain c(0.1);
  const AmpLists f16 = AmpLists::defaults(Device::cpu, DType::f16);
  const AmpLists bf16 = AmpLists::defaults(Device::cpu, DType::bf16);
  const NodeId m = c.f.node_of(c.m), s = c.f.node_of(c.s), sum = c.f.node_of(c.sum);
  auto a = allowed_types(c.f.g, f16, bf16, LowPrecisionMode::automatic);
  EXPECT_EQ(a[size_t(m)], kAllowF32 | kAllowF16 | kAllowBF16);
  EXPECT_EQ(a[size_t(s)], kAllowF32 | kAllowBF16);  // needs range
  EXPECT_EQ(a[size_t(sum)], kAllowF32);             // deny
  a = allowed_types(c.f.g, f16, bf16, LowPrecisionMode::fp16);
  EXPECT_EQ(a[size_t(s)], kAllowF32 | kAllowF16);
  a = allowed_types(c.f.g, f16, bf16, LowPrecisionMode::bf16);
  EXPECT_EQ(a[size_t(m)], kAllowF32 | kAllowBF16);
}

TEST(ThreeWayTest, BadInputIsOneErrorLine) {
  EXPECT_EQ(parse_low_precision_mode("auto"), LowPrecisionMode::automatic);
  EXPECT_THROW(parse_low_precision_mode("fp8"), Error);
  Chain c(0.1);
  std::vector<uint8_t> allowed(size_t(c.f.g.num_nodes()), kAllowF32);
  allowed[size_t(c.f.node_of(c.m))] = kAllowF16;
  c.costs.nodes[size_t(c.f.node_of(c.m))].f16_ms = kNoKernel;
  try {
    minimize_three_way(c.f.g, c.costs, allowed);
    ADD_FAILURE() << "a node without a type it may run in was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no precision to run in"), std::string::npos)
        << e.what();
  }
  c.costs.nodes[size_t(c.f.node_of(c.m))].f16_ms = -1.0;
  EXPECT_THROW(minimize_three_way(c.f.g, c.costs, allowed), Error);
  EXPECT_THROW(minimize_three_way(c.f.g, c.costs, {kAllowF32}), Error);
}

}  // namespace
}  // namespace campo
