// ConcatV2 and SplitV (ops/concat.cc, ops/cpu/concat.cc): shape inference and its one-line
// errors, CPU kernels against the naive references in tests/reference/concat.h (axis 0, 1,
// the last and negative axes, one input, integer inputs, sizes for the multithreaded path),
// bf16 / f16 against f32, gradients against finite differences, the builder, and a small
// Inception-like block (two convolutions concatenated) training through autodiff, in f32
// and under the amp policy.
#include "tests/reference/concat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
#include "ops/kernel.h"
#include "tests/gradcheck.h"
#include "tests/ops/low_precision_util.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

using testing::all_close;
using testing::check_gradients;
using testing::GradCheckOptions;
using testing::random_tensor;
using testing::run_op;

// ---- shape inference ----

TEST(ConcatOpTest, InfersShapesAlongAnyAxis) {
  Rng rng(1);
  const Tensor a = random_tensor({2, 3, 4}, rng), b = random_tensor({2, 5, 4}, rng);
  EXPECT_EQ(run_op(OpKind::ConcatV2, ConcatAttrs{1}, {a, b})[0].shape(), (Shape{2, 8, 4}));
  EXPECT_EQ(run_op(OpKind::ConcatV2, ConcatAttrs{-2}, {a, b, a})[0].shape(), (Shape{2, 11, 4}));
  EXPECT_EQ(run_op(OpKind::ConcatV2, ConcatAttrs{0}, {a, a})[0].shape(), (Shape{4, 3, 4}));
  EXPECT_EQ(run_op(OpKind::ConcatV2, ConcatAttrs{-1}, {a, a})[0].shape(), (Shape{2, 3, 8}));
  EXPECT_EQ(run_op(OpKind::ConcatV2, ConcatAttrs{2}, {a})[0].shape(), (Shape{2, 3, 4}));
  const std::vector<Tensor> pieces =
      run_op(OpKind::SplitV, SplitAttrs{-2, {3, 0, 5}}, {random_tensor({2, 8, 4}, rng)});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(pieces[1].shape(), (Shape{2, 0, 4}));
  EXPECT_EQ(pieces[2].shape(), (Shape{2, 5, 4}));
}

TEST(ConcatOpTest, MismatchesAreRejectedInOneLineNamingTheInput) {
  Rng rng(2);
  const Tensor a = random_tensor({2, 3, 4}, rng);
  std::string msg = error_message([&] {
    run_op(OpKind::ConcatV2, ConcatAttrs{1}, {a, a, random_tensor({2, 3, 5}, rng)});
  });
  EXPECT_TRUE(contains(msg, "input 2 has shape [2, 3, 5]")) << msg;
  EXPECT_TRUE(contains(msg, "dimension 2 differs (5 vs 4)")) << msg;
  EXPECT_TRUE(contains(msg, "only the concatenation axis 1 may")) << msg;
  msg = error_message([&] {
    run_op(OpKind::ConcatV2, ConcatAttrs{0}, {a, random_tensor({2, 3}, rng)});
  });
  EXPECT_TRUE(contains(msg, "input 1 has rank 2 (shape [2, 3]) but input 0 has rank 3")) << msg;
  msg = error_message([&] { run_op(OpKind::ConcatV2, ConcatAttrs{3}, {a, a}); });
  EXPECT_TRUE(contains(msg, "axis 3 is out of range")) << msg;
  EXPECT_TRUE(contains(msg, "-3 .. 2")) << msg;
  msg = error_message([&] { run_op(OpKind::ConcatV2, ConcatAttrs{-4}, {a, a}); });
  EXPECT_TRUE(contains(msg, "axis -4 is out of range")) << msg;
  msg = error_message([&] { run_op(OpKind::ConcatV2, ConcatAttrs{0}, {}); });
  EXPECT_TRUE(contains(msg, "needs at least one input")) << msg;
  msg = error_message([&] {
    run_op(OpKind::ConcatV2, ConcatAttrs{0}, {random_tensor({}, rng), random_tensor({}, rng)});
  });
  EXPECT_TRUE(contains(msg, "scalar")) << msg;
  const Tensor ints = Tensor::from_vector(std::vector<int32_t>{1, 2}, {2});
  msg = error_message([&] {
    run_op(OpKind::ConcatV2, ConcatAttrs{0}, {random_tensor({2}, rng), ints});
  });
  EXPECT_TRUE(contains(msg, "input 1 is i32 but input 0 is f32")) << msg;

  const Tensor x = random_tensor({2, 8}, rng);
  msg = error_message([&] { run_op(OpKind::SplitV, SplitAttrs{1, {3, 4}}, {x}); });
  EXPECT_TRUE(contains(msg, "size_splits [3, 4] sum to 7")) << msg;
  EXPECT_TRUE(contains(msg, "has 8 along axis 1")) << msg;
  msg = error_message([&] { run_op(OpKind::SplitV, SplitAttrs{1, {9, -1}}, {x}); });
  EXPECT_TRUE(contains(msg, "size_splits[1] is -1")) << msg;
  msg = error_message([&] { run_op(OpKind::SplitV, SplitAttrs{1, {}}, {x}); });
  EXPECT_TRUE(contains(msg, "size_splits is empty")) << msg;
  msg = error_message([&] { run_op(OpKind::SplitV, SplitAttrs{2, {8}}, {x}); });
  EXPECT_TRUE(contains(msg, "axis 2 is out of range")) << msg;
}

// ---- forward values ----

struct ConcatCase {
  std::string name;
  std::vector<Shape> inputs;
  int axis;  // as given to the op (may be negative)
};

std::ostream& operator<<(std::ostream& os, const ConcatCase& c) { return os << c.name; }

class ConcatValues : public ::testing::TestWithParam<ConcatCase> {};

int non_negative(int axis, size_t rank) { return axis < 0 ? axis + int(rank) : axis; }

TEST_P(ConcatValues, MatchReferenceAndSplitInverts) {
  const ConcatCase& c = GetParam();
  Rng rng(3);
  std::vector<Tensor> xs;
  for (const Shape& s : c.inputs) xs.push_back(random_tensor(s, rng));
  const int axis = non_negative(c.axis, c.inputs[0].size());
  const Tensor expected = reference::concat(xs, axis);
  const Tensor y = run_op(OpKind::ConcatV2, ConcatAttrs{c.axis}, xs)[0];
  EXPECT_TRUE(all_close(y, expected, 0, 0));  // a copy: bit for bit

  std::vector<int64_t> sizes;
  for (const Shape& s : c.inputs) sizes.push_back(s[size_t(axis)]);
  const std::vector<Tensor> pieces = run_op(OpKind::SplitV, SplitAttrs{c.axis, sizes}, {y});
  const std::vector<Tensor> expected_pieces = reference::split(y, axis, sizes);
  ASSERT_EQ(pieces.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(all_close(pieces[i], expected_pieces[i], 0, 0)) << "piece " << i;
    EXPECT_TRUE(all_close(pieces[i], xs[i], 0, 0)) << "piece " << i;
  }

  // bf16 and f16: the same copy of the rounded values, bit for bit.
  for (DType low : {DType::bf16, DType::f16}) {
    std::vector<Tensor> low_xs, rounded;
    for (const Tensor& x : xs) {
      low_xs.push_back(testing::as_dtype(x, low));
      rounded.push_back(Tensor::from_vector(low_xs.back().to_float_vector(), x.shape()));
    }
    const Tensor low_y = run_op(OpKind::ConcatV2, ConcatAttrs{c.axis}, low_xs, low)[0];
    EXPECT_EQ(low_y.dtype(), low);
    EXPECT_TRUE(all_close(low_y, reference::concat(rounded, axis), 0, 0)) << dtype_name(low);
    const std::vector<Tensor> low_pieces =
        run_op(OpKind::SplitV, SplitAttrs{c.axis, sizes}, {low_y}, low);
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(low_pieces[i].dtype(), low);
      EXPECT_TRUE(all_close(low_pieces[i], rounded[i], 0, 0)) << dtype_name(low) << " piece " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Axes, ConcatValues,
    ::testing::Values(
        ConcatCase{"axis0", {{2, 3, 4}, {5, 3, 4}, {1, 3, 4}}, 0},
        ConcatCase{"axis1_nchw", {{2, 3, 5, 5}, {2, 7, 5, 5}, {2, 1, 5, 5}, {2, 4, 5, 5}}, 1},
        ConcatCase{"axis_last", {{3, 4, 2}, {3, 4, 5}}, 2},
        ConcatCase{"axis_minus1", {{6, 3}, {6, 1}, {6, 2}}, -1},
        ConcatCase{"axis_minus3_is_1", {{2, 3, 5, 5}, {2, 2, 5, 5}}, -3},
        ConcatCase{"one_input", {{4, 5}}, 1}, ConcatCase{"rank1", {{7}, {9}}, 0},
        ConcatCase{"empty_piece", {{2, 0, 3}, {2, 4, 3}}, 1},
        // Above the kernel's parallel threshold (256 KiB), with parts of several 64 KiB
        // pieces and parts shorter than one: Inception's channel concatenation, smaller.
        ConcatCase{"parallel_nchw", {{4, 24, 17, 17}, {4, 40, 17, 17}, {4, 3, 17, 17}}, 1},
        ConcatCase{"parallel_axis0", {{40, 1000}, {50, 1000}}, 0}),
    [](const auto& info) { return info.param.name; });

TEST(ConcatOpTest, IntegerInputsKeepTheirType) {
  const Tensor a = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::from_vector(std::vector<int32_t>{5, 6}, {2, 1});
  const Tensor y = run_op(OpKind::ConcatV2, ConcatAttrs{1}, {a, b})[0];
  ASSERT_EQ(y.dtype(), DType::i32);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  const int32_t* v = y.data_as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(v, v + 6), (std::vector<int32_t>{1, 2, 5, 3, 4, 6}));
}

// ---- gradients ----

TEST(ConcatGradTest, MatchesFiniteDifferences) {
  Rng rng(4);
  EXPECT_TRUE(check_gradients(OpKind::ConcatV2, ConcatAttrs{1},
                              {random_tensor({2, 3, 2, 2}, rng), random_tensor({2, 1, 2, 2}, rng),
                               random_tensor({2, 2, 2, 2}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::ConcatV2, ConcatAttrs{-1},
                              {random_tensor({3, 2}, rng), random_tensor({3, 4}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::ConcatV2, ConcatAttrs{0},
                              {random_tensor({1, 5}, rng), random_tensor({2, 5}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::ConcatV2, ConcatAttrs{0}, {random_tensor({4, 3}, rng)}));
  GradCheckOptions all_pieces;
  all_pieces.loss_outputs = {0, 1, 2};
  EXPECT_TRUE(check_gradients(OpKind::SplitV, SplitAttrs{-1, {2, 1, 3}},
                              {random_tensor({3, 6}, rng)}, all_pieces));
}

// The gradient of an N-input ConcatV2 is one SplitV node with N outputs, whose pieces are
// the inputs' gradients.
TEST(ConcatGradTest, IsOneSplitVNodeWithAnOutputPerInput) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  std::vector<ValueId> xs;
  for (int i = 0; i < 3; ++i)
    xs.push_back(b.variable_exact("x" + std::to_string(i), {2, int64_t(i) + 1, 3},
                                  Init::uniform(-1, 1), VariableKind::parameter));
  ValueId y = b.concat(xs, -2);
  ValueId loss = b.sum(b.mul(y, y));
  std::vector<ValueId> grads = append_gradients(b, loss, b.placeholder("seed", {}), xs);
  ASSERT_EQ(g.nodes_of_kind(OpKind::SplitV).size(), 1u);
  const Node& split = g.node(g.nodes_of_kind(OpKind::SplitV)[0]);
  EXPECT_EQ(attrs_as<SplitAttrs>(split.attrs).axis, 1);
  EXPECT_EQ(attrs_as<SplitAttrs>(split.attrs).size_splits, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ(split.outputs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(grads[size_t(i)], split.outputs[size_t(i)]);
    EXPECT_EQ(g.value(grads[size_t(i)]).shape, g.value(xs[size_t(i)]).shape);
  }
}

// A SplitV piece that does not reach the loss (BERT keeps the first rows of its position
// table) contributes zeros to the input's gradient: finite differences agree, and the
// zeros come from one Const of the piece's shape.
TEST(ConcatGradTest, SplitVPieceOffTheLossPathGetsZeroGradient) {
  Rng rng(5);
  GradCheckOptions first_only;
  first_only.loss_outputs = {0};
  EXPECT_TRUE(check_gradients(OpKind::SplitV, SplitAttrs{0, {3, 5}}, {random_tensor({8, 4}, rng)},
                              first_only));
  GradCheckOptions middle_only;
  middle_only.loss_outputs = {1};
  EXPECT_TRUE(check_gradients(OpKind::SplitV, SplitAttrs{-1, {2, 1, 3}},
                              {random_tensor({3, 6}, rng)}, middle_only));

  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.variable_exact("x", {2, 6}, Init::ones(), VariableKind::parameter);
  std::vector<ValueId> pieces = b.op_multi(OpKind::SplitV, {x}, SplitAttrs{1, {2, 4}}, "qk");
  ValueId loss = b.sum(pieces[1]);
  std::vector<ValueId> grads = append_gradients(b, loss, b.placeholder("seed", {}), {x});
  EXPECT_EQ(g.value(grads[0]).shape, (Shape{2, 6}));
  ASSERT_EQ(g.nodes_of_kind(OpKind::Const).size(), 1u);
  const Node& zeros = g.node(g.nodes_of_kind(OpKind::Const)[0]);
  EXPECT_EQ(attrs_as<ConstAttrs>(zeros.attrs).shape, (Shape{2, 2}));
  EXPECT_EQ(attrs_as<ConstAttrs>(zeros.attrs).value, 0.0f);
}

// ---- builder ----

TEST(ConcatBuilderTest, NormalisesTheAxisAndChecksIt) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId a = b.placeholder("a", {2, 3, 5, 5}), c = b.placeholder("c", {2, 4, 5, 5});
  ValueId y = b.concat({a, c}, -3);
  const Node& n = g.node(g.value(y).producer);
  EXPECT_EQ(n.kind, OpKind::ConcatV2);
  EXPECT_EQ(attrs_as<ConcatAttrs>(n.attrs).axis, 1);
  EXPECT_EQ(g.value(y).shape, (Shape{2, 7, 5, 5}));
  EXPECT_TRUE(contains(g.to_text(), "ConcatV2<f32>(v0, v1) axis=1 -> v2:f32[2, 7, 5, 5]"))
      << g.to_text();
  EXPECT_EQ(b.concat({a}, 1), a);  // one input: itself, no node
  std::string msg = error_message([&] { b.concat({a, c}, 4); });
  EXPECT_TRUE(contains(msg, "concat: axis 4 is out of range")) << msg;
  msg = error_message([&] { b.concat({}, 0); });
  EXPECT_TRUE(contains(msg, "concat of nothing")) << msg;
  msg = error_message([&] { b.concat({a, b.placeholder("d", {2, 4, 5, 6})}, 1); });
  EXPECT_TRUE(contains(msg, "input 1 has shape [2, 4, 5, 6]")) << msg;
}

// ---- a small Inception block trains ----

// images [N, 3, 8, 8] -> {1x1 conv to 4 channels, 3x3 conv to 6} -> ConcatV2 on channels ->
// ReLU -> global average pool -> MatMul to 5 classes -> cross entropy; SGD.
struct InceptionBlockStep {
  Graph g;
  VariableStore vars{7, default_cpu_backend()};
  ValueId loss = kNoValue;
  std::unique_ptr<Executable> exe;

  explicit InceptionBlockStep(bool amp) {
    Builder b(g, vars);
    const int64_t n = 8;
    ValueId images = b.placeholder("images", {n, 3, 8, 8});
    ValueId labels = b.placeholder("labels", {n}, DType::i32);
    ValueId w1 = b.variable("w1x1", {4, 3, 1, 1}, Init::kaiming_normal(3));
    ValueId w3 = b.variable("w3x3", {6, 3, 3, 3}, Init::kaiming_normal(27));
    ValueId branch1 = b.conv2d(images, w1, testing::conv(1, 0));
    ValueId branch3 = b.conv2d(images, w3, testing::conv(1, 1));
    ValueId joined = b.relu(b.concat({branch1, branch3}, 1));
    ValueId pooled = b.flatten(b.global_avg_pool(joined));
    ValueId fc = b.variable("fc", {10, 5}, Init::kaiming_normal(10));
    loss = b.mean(b.sparse_softmax_cross_entropy(b.matmul(pooled, fc), labels));
    auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (auto& name : params) pv.push_back(g.node(g.find_node(name)).outputs[0]);
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

TEST(ConcatTrainingTest, InceptionBlockLearnsAFixedBatch) {
  InceptionBlockStep s(false);
  ASSERT_EQ(s.g.nodes_of_kind(OpKind::ConcatV2).size(), 1u);
  ASSERT_EQ(s.g.nodes_of_kind(OpKind::SplitV).size(), 1u);
  const float first = s.step();
  float last = first;
  for (int i = 0; i < 30; ++i) last = s.step();
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_LT(last, first * 0.8f) << "overfitting one fixed batch must drive the loss down";
}

// Under amp (bf16), ConcatV2 and its SplitV are clear ops between convolutions and ReLU:
// painted bf16 with the convolutions, no cast between them.
TEST(ConcatTrainingTest, InceptionBlockRunsInBf16UnderAmp) {
  InceptionBlockStep s(true);
  const Node& concat = s.g.node(s.g.nodes_of_kind(OpKind::ConcatV2)[0]);
  const Node& split = s.g.node(s.g.nodes_of_kind(OpKind::SplitV)[0]);
  EXPECT_EQ(concat.dtype, DType::bf16);
  EXPECT_EQ(split.dtype, DType::bf16);
  for (ValueId v : concat.inputs) EXPECT_NE(s.g.node(s.g.value(v).producer).kind, OpKind::Cast);
  for (ValueId v : split.outputs) EXPECT_EQ(s.g.value(v).dtype, DType::bf16);
  const float first = s.step();
  float last = first;
  for (int i = 0; i < 30; ++i) last = s.step();
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_LT(last, first * 0.8f);
}

}  // namespace
}  // namespace campo
