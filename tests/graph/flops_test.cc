// FLOP counts of single nodes against the formulas of graph/flops.h, and of a whole LeNet
// training step against a count by hand.
#include "graph/flops.h"

#include <gtest/gtest.h>

#include "graph/builder.h"
#include "perf/bench.h"
#include "perf/plan.h"

namespace campo {
namespace {

int64_t flops_of(const Graph& g, ValueId v) { return node_flops(g, g.node(g.value(v).producer)); }

TEST(FlopsTest, Conv2DIsTwoNKCRSOhOw) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3, 8, 8});
  ValueId w = b.variable_exact("w", {4, 3, 3, 3}, Init::ones(), VariableKind::parameter);
  ValueId y = b.conv2d(x, w, {.pad_h = 1, .pad_w = 1});
  ASSERT_EQ(g.value(y).shape, (Shape{2, 4, 8, 8}));
  EXPECT_EQ(flops_of(g, y), 2 * 2 * 4 * 3 * 3 * 3 * 8 * 8);
  EXPECT_TRUE(is_gemm_op(OpKind::Conv2D));
}

// Stride 2, padding 1, two groups: C/groups input channels per output channel; both
// backprops are the same products as the forward convolution.
TEST(FlopsTest, StridedPaddedGroupedConvAndItsBackpropsCountTheSame) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 4, 9, 9});
  ValueId w = b.variable_exact("w", {6, 2, 3, 3}, Init::ones(), VariableKind::parameter);
  ConvAttrs a{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .groups = 2};
  ValueId y = b.conv2d(x, w, a);
  ASSERT_EQ(g.value(y).shape, (Shape{2, 6, 5, 5}));
  const int64_t expected = 2LL * 2 * 6 * (4 / 2) * 3 * 3 * 5 * 5;  // 2 N K (C/g) R S OH OW
  EXPECT_EQ(flops_of(g, y), expected);
  ValueId dy = b.placeholder("dy", {2, 6, 5, 5});
  ConvAttrs dx_attrs = a;
  dx_attrs.output_shape = {2, 4, 9, 9};
  EXPECT_EQ(flops_of(g, b.op(OpKind::Conv2DBackpropInput, {dy, w}, dx_attrs)), expected);
  ConvAttrs dw_attrs = a;
  dw_attrs.output_shape = {6, 2, 3, 3};
  EXPECT_EQ(flops_of(g, b.op(OpKind::Conv2DBackpropFilter, {x, dy}, dw_attrs)), expected);
}

// DCGAN's generator layer: a transposed convolution is the Conv2DBackpropInput of the
// convolution it inverts, and costs what that convolution costs.
TEST(FlopsTest, TransposedConvolutionCostsItsForwardConvolution) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId u = b.placeholder("u", {1, 8, 4, 4});
  ValueId w = b.variable_exact("w", {8, 3, 4, 4}, Init::ones(), VariableKind::parameter);
  ValueId z = b.conv2d_transpose(
      u, w, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .output_shape = {1, 3, 8, 8}});
  // conv([1, 3, 8, 8], [8, 3, 4, 4], stride 2, pad 1) -> [1, 8, 4, 4]
  EXPECT_EQ(flops_of(g, z), 2 * 1 * 8 * 3 * 4 * 4 * 4 * 4);
}

TEST(FlopsTest, MatMulHonoursTransposes) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId a = b.placeholder("a", {5, 3});  // transposed: [3, 5], M = 3, K = 5
  ValueId w = b.placeholder("w", {7, 5});  // transposed: [5, 7], N = 7
  ValueId c = b.matmul(a, w, /*transpose_a=*/true, /*transpose_b=*/true);
  ASSERT_EQ(g.value(c).shape, (Shape{3, 7}));
  EXPECT_EQ(flops_of(g, c), 2 * 3 * 7 * 5);
  ValueId d = b.matmul(b.placeholder("p", {4, 6}), b.placeholder("q", {6, 2}));
  EXPECT_EQ(flops_of(g, d), 2 * 4 * 2 * 6);
}

TEST(FlopsTest, BatchMatMulIsBatchTimesTwoMNK) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 4, 6, 5});  // adj_x: [.., 5, 6], M = 5, K = 6
  ValueId y = b.placeholder("y", {2, 4, 6, 3});  // N = 3
  ValueId z = b.batch_matmul(x, y, /*adj_x=*/true);
  ASSERT_EQ(g.value(z).shape, (Shape{2, 4, 5, 3}));
  EXPECT_EQ(flops_of(g, z), 2 * 4 * 2 * 5 * 3 * 6);
}

// Cheap ops: 1 per output element; data movement and casts: 0. count_step_flops sums the
// live nodes only.
TEST(FlopsTest, CheapOpsOnePerElementDataMovementNothingDeadCodeNothing) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3});
  ValueId r = b.relu(x);
  EXPECT_EQ(flops_of(g, r), 6);
  EXPECT_EQ(flops_of(g, b.reshape(r, {3, 2})), 0);
  EXPECT_EQ(flops_of(g, b.cast(r, DType::bf16)), 0);
  ValueId m = b.matmul(r, b.placeholder("w", {3, 4}));  // 2 * 2 * 4 * 3 = 48
  ValueId dead = b.tanh(m);
  (void)dead;
  ValueId s = b.sum(m);  // 1 element
  const FlopCount c = count_step_flops(g, {s});
  EXPECT_EQ(c.gemm, 48);
  EXPECT_EQ(c.gemm_low, 0);
  EXPECT_EQ(c.other, 6 + 1);  // the relu and the sum; the tanh is dead code
  EXPECT_EQ(c.total(), 55);
}

// LeNet at 28 px, batch 16: forward GEMMs by hand; the training step runs each GEMM three
// times (forward, input gradient, weight gradient) except conv1's input gradient, which
// autodiff does not build (the images need no gradient).
TEST(FlopsTest, LenetTrainingStepCountsThreeForwardGemmsLessConv1InputGradient) {
  ModelRunOptions run;
  run.model = "lenet";
  run.batch = 16;
  const int64_t n = run.batch;
  const int64_t conv1 = 2 * n * 6 * 1 * 5 * 5 * 28 * 28;  // pad 2: 28x28 out
  const int64_t conv2 = 2 * n * 16 * 6 * 5 * 5 * 10 * 10;
  const int64_t fc = 2 * n * (400 * 120 + 120 * 84 + 84 * 10);
  const int64_t forward = conv1 + conv2 + fc;
  for (Precision policy : {Precision::fp32, Precision::amp}) {
    Graph g;
    VariableStore vars(1, default_cpu_backend());
    const TrainingGraphInfo info = build_training_graph(g, vars, model_run_spec(run, policy));
    const std::vector<char> live = live_nodes(g, info.fetches());
    auto live_of_kind = [&](OpKind k) {
      int c = 0;
      for (NodeId id : g.nodes_of_kind(k)) c += live[size_t(id)];
      return c;
    };
    ASSERT_EQ(live_of_kind(OpKind::Conv2D), 2);
    ASSERT_EQ(live_of_kind(OpKind::Conv2DBackpropFilter), 2);
    ASSERT_EQ(live_of_kind(OpKind::Conv2DBackpropInput), 1);  // conv2's only
    ASSERT_EQ(live_of_kind(OpKind::MatMul), 3 * 3);
    const FlopCount c = count_step_flops(g, info.fetches());
    EXPECT_EQ(c.gemm, 3 * forward - conv1) << precision_name(policy);
    EXPECT_EQ(c.gemm, 36222720);
    // amp runs every GEMM in bf16 on the CPU.
    EXPECT_EQ(c.gemm_low, policy == Precision::amp ? c.gemm : 0) << precision_name(policy);
    EXPECT_GT(c.other, 0);
    EXPECT_LT(c.other, c.gemm / 10);
  }
}

}  // namespace
}  // namespace campo
