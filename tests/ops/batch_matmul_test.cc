// BatchMatMulV2 (ops/batch_matmul.cc, ops/cpu/batch_matmul.cc): the oneDNN kernel against
// the naive reference (tests/reference/batch_matmul.h) for all four adjoint combinations at
// ranks 2, 3 and 4 (BERT's attention shapes, smaller), gradients against finite differences,
// bf16 / f16 against f32, shape errors in one line, the builder and the graph dump, the
// gradient's structure (BatchMatMulV2 nodes only), and a tiny attention layer (with
// Transpose) training in f32 and under the amp policy in bf16.
#include "tests/reference/batch_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
#include "ops/op.h"
#include "tests/gradcheck.h"
#include "tests/ops/low_precision_util.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

using testing::all_close;
using testing::check_gradients;
using testing::random_tensor;
using testing::run_op;

// As MatMul's test (tests/ops/matmul_test.cc): oneDNN sums the K products in blocks, in
// another order than the reference, so the f32 table's 1.3e-6 / 1e-5 is loosened to
// 1e-5 / 1e-4 (K up to a few hundred, entries in [-1, 1]).
constexpr double kRtol = 1e-5, kAtol = 1e-4;

struct BmmCase {
  Shape batch;  // the leading dims of x, y and z
  int64_t M, K, N;
  bool adj_x, adj_y;
};

std::string case_name(const BmmCase& c) {
  std::string s = "b";
  for (int64_t d : c.batch) s += std::to_string(d) + "_";
  return s + std::to_string(c.M) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N) +
         (c.adj_x ? "_adjx" : "") + (c.adj_y ? "_adjy" : "");
}

// x [..., M, K] or, adjoint, [..., K, M]; y likewise.
Shape side(const Shape& batch, int64_t rows, int64_t cols, bool adjoint) {
  Shape s = batch;
  s.push_back(adjoint ? cols : rows);
  s.push_back(adjoint ? rows : cols);
  return s;
}

std::vector<BmmCase> bmm_cases() {
  std::vector<BmmCase> cases;
  for (bool ax : {false, true})
    for (bool ay : {false, true}) {
      cases.push_back({{}, 7, 5, 3, ax, ay});         // rank 2: one product
      cases.push_back({{3}, 1, 9, 1, ax, ay});        // rank 3, vectors
      cases.push_back({{2, 3}, 16, 8, 16, ax, ay});   // rank 4: q k^T, [B, heads, T, d]
      cases.push_back({{2, 2}, 33, 65, 17, ax, ay});  // rank 4, nothing aligned
    }
  return cases;
}

class BatchMatMulOpTest : public ::testing::TestWithParam<BmmCase> {};

TEST_P(BatchMatMulOpTest, ForwardMatchesReference) {
  const BmmCase& c = GetParam();
  Rng rng(1);
  const Tensor x = random_tensor(side(c.batch, c.M, c.K, c.adj_x), rng);
  const Tensor y = random_tensor(side(c.batch, c.K, c.N, c.adj_y), rng);
  const std::vector<Tensor> z =
      run_op(OpKind::BatchMatMulV2, BatchMatMulAttrs{c.adj_x, c.adj_y}, {x, y});
  ASSERT_EQ(z.size(), 1u);
  EXPECT_EQ(z[0].shape(), side(c.batch, c.M, c.N, false));
  EXPECT_TRUE(all_close(z[0], reference::batch_matmul(x, y, c.adj_x, c.adj_y), kRtol, kAtol));
}

// bf16 and f16 against f32 on inputs rounded to the type first (oneDNN's bf16 matmul, or
// the f32 kernel emulated, accumulates in f32 and rounds once): the per-dtype table.
TEST_P(BatchMatMulOpTest, LowPrecisionMatchesF32OnRoundedInputs) {
  const BmmCase& c = GetParam();
  Rng rng(2);
  const Tensor x = random_tensor(side(c.batch, c.M, c.K, c.adj_x), rng);
  const Tensor y = random_tensor(side(c.batch, c.K, c.N, c.adj_y), rng);
  const BatchMatMulAttrs a{c.adj_x, c.adj_y};
  for (DType low : {DType::bf16, DType::f16}) {
    const Tensor xl = testing::as_dtype(x, low), yl = testing::as_dtype(y, low);
    const Tensor xr = Tensor::from_vector(xl.to_float_vector(), x.shape());
    const Tensor yr = Tensor::from_vector(yl.to_float_vector(), y.shape());
    const Tensor expected = run_op(OpKind::BatchMatMulV2, a, {xr, yr})[0];
    const Tensor actual = run_op(OpKind::BatchMatMulV2, a, {xl, yl}, low)[0];
    EXPECT_EQ(actual.dtype(), low);
    const testing::Tolerance tol = testing::tolerance_for(low);
    EXPECT_TRUE(all_close(actual, expected, tol.rtol, tol.atol)) << dtype_name(low);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchMatMulOpTest, ::testing::ValuesIn(bmm_cases()),
                         [](const auto& info) { return case_name(info.param); });

// BERT's shapes at its smallest (B = 32, 4 heads, T = 64, d = 64): the scores q k^T and the
// context p v, against the reference (a few hundred thousand products each).
TEST(BatchMatMulOpTest, BertAttentionShapes) {
  Rng rng(3);
  const Tensor q = random_tensor({32, 4, 64, 64}, rng), k = random_tensor({32, 4, 64, 64}, rng);
  const Tensor scores = run_op(OpKind::BatchMatMulV2, BatchMatMulAttrs{false, true}, {q, k})[0];
  EXPECT_EQ(scores.shape(), (Shape{32, 4, 64, 64}));
  EXPECT_TRUE(all_close(scores, reference::batch_matmul(q, k, false, true), kRtol, kAtol));
  const Tensor context = run_op(OpKind::BatchMatMulV2, BatchMatMulAttrs{}, {scores, k})[0];
  EXPECT_TRUE(all_close(context, reference::batch_matmul(scores, k, false, false), kRtol,
                        10 * kAtol));  // scores of a few units: 64 terms larger than in [-1, 1]
}

// ---- gradients ----

class BatchMatMulGradTest : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(BatchMatMulGradTest, MatchesFiniteDifferences) {
  const auto [ax, ay] = GetParam();
  Rng rng(4);
  const Tensor x = random_tensor(side({2, 2}, 3, 4, ax), rng);
  const Tensor y = random_tensor(side({2, 2}, 4, 5, ay), rng);
  EXPECT_TRUE(check_gradients(OpKind::BatchMatMulV2, BatchMatMulAttrs{ax, ay}, {x, y}));
  // Rank 3.
  const Tensor x3 = random_tensor(side({3}, 2, 3, ax), rng);
  const Tensor y3 = random_tensor(side({3}, 3, 4, ay), rng);
  EXPECT_TRUE(check_gradients(OpKind::BatchMatMulV2, BatchMatMulAttrs{ax, ay}, {x3, y3}));
}

INSTANTIATE_TEST_SUITE_P(Adjoints, BatchMatMulGradTest,
                         ::testing::Values(std::pair{false, false}, std::pair{true, false},
                                           std::pair{false, true}, std::pair{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.first ? "adjx" : "x") +
                                  (info.param.second ? "_adjy" : "_y");
                         });

// The gradient is two BatchMatMulV2 nodes, no Transpose: the adjoints do the transposing.
TEST(BatchMatMulGradTest, IsTwoBatchMatMulsWithoutTransposes) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x =
      b.variable_exact("x", {2, 3, 8, 4}, Init::uniform(-1, 1), VariableKind::parameter);
  const ValueId y =
      b.variable_exact("y", {2, 3, 8, 4}, Init::uniform(-1, 1), VariableKind::parameter);
  const ValueId z = b.batch_matmul(x, y, false, true);
  const ValueId loss = b.sum(b.mul(z, z));
  const std::vector<ValueId> grads = append_gradients(b, loss, b.placeholder("seed", {}), {x, y});
  EXPECT_EQ(g.nodes_of_kind(OpKind::BatchMatMulV2).size(), 3u);
  EXPECT_EQ(g.nodes_of_kind(OpKind::Transpose).size(), 0u);
  EXPECT_EQ(g.value(grads[0]).shape, (Shape{2, 3, 8, 4}));
  EXPECT_EQ(g.value(grads[1]).shape, (Shape{2, 3, 8, 4}));
}

// ---- shape errors ----

TEST(BatchMatMulShapeTest, MismatchesAreOneLineNamingBothShapes) {
  Rng rng(5);
  const BatchMatMulAttrs plain{}, adj_y{false, true};
  std::string msg = error_message([&] {
    run_op(OpKind::BatchMatMulV2, plain,
           {random_tensor({2, 3, 7, 5}, rng), random_tensor({2, 3, 4, 6}, rng)});
  });
  EXPECT_TRUE(contains(msg, "BatchMatMulV2")) << msg;
  EXPECT_TRUE(contains(msg, "inner dimensions differ: x [2, 3, 7, 5] has 5, y [2, 3, 4, 6] has 4"))
      << msg;
  msg = error_message([&] {
    run_op(OpKind::BatchMatMulV2, adj_y,
           {random_tensor({2, 7, 5}, rng), random_tensor({2, 6, 4}, rng)});
  });
  EXPECT_TRUE(contains(msg, "y [2, 6, 4] (adj_y) has 4")) << msg;
  // Batch dims: unequal, and broadcast (one side 1), are both refused.
  msg = error_message([&] {
    run_op(OpKind::BatchMatMulV2, plain,
           {random_tensor({2, 4, 7, 5}, rng), random_tensor({2, 3, 5, 6}, rng)});
  });
  EXPECT_TRUE(
      contains(msg, "batch dimension 1 differs: x [2, 4, 7, 5] has 4, y [2, 3, 5, 6] has 3"))
      << msg;
  msg = error_message([&] {
    run_op(OpKind::BatchMatMulV2, plain,
           {random_tensor({2, 3, 7, 5}, rng), random_tensor({1, 3, 5, 6}, rng)});
  });
  EXPECT_TRUE(contains(msg, "broadcasting them is not supported")) << msg;
  EXPECT_TRUE(contains(msg, "x [2, 3, 7, 5]")) << msg;
  EXPECT_TRUE(contains(msg, "y [1, 3, 5, 6]")) << msg;
  // Ranks: differing, or below 2.
  msg = error_message([&] {
    run_op(OpKind::BatchMatMulV2, plain,
           {random_tensor({2, 7, 5}, rng), random_tensor({5, 6}, rng)});
  });
  EXPECT_TRUE(contains(msg, "one rank >= 2")) << msg;
  EXPECT_TRUE(contains(msg, "got x [2, 7, 5] and y [5, 6]")) << msg;
  msg = error_message([&] {
    run_op(OpKind::BatchMatMulV2, plain, {random_tensor({5}, rng), random_tensor({5}, rng)});
  });
  EXPECT_TRUE(contains(msg, "one rank >= 2")) << msg;
  // Integer inputs.
  msg = error_message([&] {
    run_op(OpKind::BatchMatMulV2, plain,
           {Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {1, 2, 2}),
            random_tensor({1, 2, 2}, rng)});
  });
  EXPECT_TRUE(contains(msg, "input 0 is i32, expected a floating type")) << msg;
}

// ---- builder, graph dump, lists ----

TEST(BatchMatMulBuilderTest, EmitsTheNodeAndDumpsItsAdjoints) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId q = b.placeholder("q", {2, 4, 8, 16}), k = b.placeholder("k", {2, 4, 8, 16});
  const ValueId scores = b.batch_matmul(q, k, false, true);
  const Node& n = g.node(g.value(scores).producer);
  EXPECT_EQ(n.kind, OpKind::BatchMatMulV2);
  EXPECT_FALSE(attrs_as<BatchMatMulAttrs>(n.attrs).adj_x);
  EXPECT_TRUE(attrs_as<BatchMatMulAttrs>(n.attrs).adj_y);
  EXPECT_EQ(g.value(scores).shape, (Shape{2, 4, 8, 8}));
  EXPECT_TRUE(contains(g.to_text(), "BatchMatMulV2<f32>(v0, v1) adj_y -> v2:f32[2, 4, 8, 8]"))
      << g.to_text();
  EXPECT_EQ(op_name(OpKind::BatchMatMulV2), std::string("BatchMatMulV2"));
  EXPECT_EQ(parse_op_kind("BatchMatMulV2"), OpKind::BatchMatMulV2);
  EXPECT_EQ(op_schema(OpKind::BatchMatMulV2).amp_list, AmpList::allow);
  EXPECT_TRUE(op_schema(OpKind::BatchMatMulV2).is_tensor_core_candidate);
}

// Padding is MatMul's alone: a BatchMatMulV2 node asked to pad is refused, not ignored.
TEST(BatchMatMulKernelTest, PaddingRequestIsRefused) {
  ExecContext ctx;
  KernelSpec spec{OpKind::BatchMatMulV2,
                  BatchMatMulAttrs{},
                  DType::f32,
                  {{{2, 3, 5}, DType::f32}, {{2, 5, 7}, DType::f32}},
                  {{{2, 3, 7}, DType::f32}},
                  "bmm",
                  16};
  const std::string msg = error_message([&] { create_kernel(spec, ctx); });
  EXPECT_TRUE(contains(msg, "BatchMatMulV2 'bmm': padding (pad_to = 16)")) << msg;
}

// An empty K: z is all zeros, whatever the output buffer held.
TEST(BatchMatMulKernelTest, EmptyInnerDimensionGivesZeros) {
  ExecContext ctx;
  KernelSpec spec{OpKind::BatchMatMulV2,
                  BatchMatMulAttrs{},
                  DType::f32,
                  {{{2, 3, 0}, DType::f32}, {{2, 0, 4}, DType::f32}},
                  {{{2, 3, 4}, DType::f32}},
                  "bmm"};
  auto kernel = create_kernel(spec, ctx);
  Tensor z = Tensor::from_vector(std::vector<float>(24, 7.0f), {2, 3, 4});
  kernel->run(ctx, {Tensor::empty({2, 3, 0}, DType::f32), Tensor::empty({2, 0, 4}, DType::f32)},
              {z});
  EXPECT_EQ(z.to_float_vector(), std::vector<float>(24, 0.0f));
}

// ---- a small attention layer trains ----

// One self-attention layer as BERT's, tiny: images [N * T, C] (N = 4 sequences of T = 8
// tokens, C = 16 = 2 heads of d = 8) -> q, k, v = images W (MatMul) -> Reshape [N, T, H, d]
// -> Transpose {0, 2, 1, 3} -> scores = q k^T (BatchMatMulV2, adj_y) -> Softmax -> p v
// (BatchMatMulV2) -> Transpose {0, 2, 1, 3} -> Reshape [N, T * C] -> MatMul to 5 classes ->
// cross entropy; SGD. (No 1/sqrt(d) scaling: campo has no scalar multiply op yet.)
struct AttentionStep {
  Graph g;
  VariableStore vars{7, default_cpu_backend()};
  ValueId loss = kNoValue;
  std::unique_ptr<Executable> exe;

  explicit AttentionStep(bool amp) {
    Builder b(g, vars);
    const int64_t n = 4, t = 8, heads = 2, d = 8, c = heads * d;
    const ValueId images = b.placeholder("images", {n * t, c});
    const ValueId labels = b.placeholder("labels", {n}, DType::i32);
    auto split_heads = [&](const std::string& name) {
      const ValueId w = b.variable(name, {c, c}, Init::kaiming_normal(c));
      return b.transpose(b.reshape(b.matmul(images, w), {n, t, heads, d}), {0, 2, 1, 3});
    };
    const ValueId q = split_heads("wq"), k = split_heads("wk"), v = split_heads("wv");
    const ValueId p = b.softmax(b.batch_matmul(q, k, false, true));
    const ValueId context = b.transpose(b.batch_matmul(p, v), {0, 2, 1, 3});
    const ValueId fc = b.variable("fc", {t * c, 5}, Init::kaiming_normal(t * c));
    loss = b.mean(
        b.sparse_softmax_cross_entropy(b.matmul(b.reshape(context, {n, t * c}), fc), labels));
    const auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (const auto& name : params) pv.push_back(g.node(g.find_node(name)).outputs[0]);
    append_optimizer(b, params, append_gradients(b, loss, b.placeholder("loss_scale", {}), pv),
                     OptimizerConfig{});
    if (amp) apply_amp_policy(g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
    CompileOptions co;
    co.fetches = {loss};
    exe = std::make_unique<Executable>(g, vars, co);
    testing::fill_classifier_step_inputs(*exe, 11, 5, 0.1f);
  }
  float step() {
    exe->run();
    return exe->output(loss).data_as<float>()[0];
  }
};

TEST(AttentionTrainingTest, LearnsAFixedBatch) {
  AttentionStep s(false);
  // Products: 2 forward, 2 backward each; transposes: 4 forward (q, k, v, context), 4 backward.
  EXPECT_EQ(s.g.nodes_of_kind(OpKind::BatchMatMulV2).size(), 2u + 4u);
  EXPECT_EQ(s.g.nodes_of_kind(OpKind::Transpose).size(), 4u + 4u);
  const float first = s.step();
  float last = first;
  for (int i = 0; i < 30; ++i) last = s.step();
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_LT(last, first * 0.8f) << "overfitting one fixed batch must drive the loss down";
}

// Under amp (bf16) the products are allow ops and the transposes clear ops between them and
// the (allow) projections: all bf16, no Cast between a Transpose and a product.
TEST(AttentionTrainingTest, RunsInBf16UnderAmp) {
  AttentionStep s(true);
  for (NodeId id : s.g.nodes_of_kind(OpKind::BatchMatMulV2)) {
    const Node& n = s.g.node(id);
    EXPECT_EQ(n.dtype, DType::bf16) << n.name;
    for (ValueId v : n.inputs) {
      const Node& producer = s.g.node(s.g.value(v).producer);
      if (producer.kind == OpKind::Transpose) EXPECT_EQ(producer.dtype, DType::bf16) << n.name;
      if (producer.kind == OpKind::Cast)
        EXPECT_NE(s.g.node(s.g.value(producer.inputs[0]).producer).kind, OpKind::Transpose)
            << n.name;
    }
  }
  for (NodeId id : s.g.nodes_of_kind(OpKind::Transpose))
    EXPECT_EQ(s.g.node(id).dtype, DType::bf16) << s.g.node(id).name;
  const float first = s.step();
  float last = first;
  for (int i = 0; i < 30; ++i) last = s.step();
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_LT(last, first * 0.8f);
}

}  // namespace
}  // namespace campo
