// Softmax / SoftmaxGrad: the CPU kernels against the double-precision reference
// (tests/reference/softmax.h) on several shapes, large logits (the max subtraction),
// gradients against finite differences, the schema's errors, and a tiny model trained
// through autodiff in f32 and under the amp policy in bf16. bf16 / f16 against f32 on the
// same rounded inputs: tests/ops/low_precision_test.cc (cases Softmax*, SoftmaxGrad).
#include "tests/reference/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops/schema.h"
#include "tests/gradcheck.h"
#include "tests/ops/tiny_training.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::error_message;

using testing::all_close;
using testing::check_gradients;
using testing::random_tensor;
using testing::run_op;

// oneDNN's JIT exp is within a few f32 ulp of exp, and a row of S terms sums S of them:
// a few 1e-7 relative, inside the f32 table's 1.3e-6 / 1e-5 for every shape here.
const testing::Tolerance kTol = testing::tolerance_for(DType::f32);

class SoftmaxShapeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(SoftmaxShapeTest, ForwardAndGradMatchReference) {
  Rng rng(1);
  const Shape& s = GetParam();
  Tensor x = random_tensor(s, rng, -6.0f, 6.0f);
  Tensor y = run_op(OpKind::Softmax, NoAttrs{}, {x})[0];
  EXPECT_TRUE(all_close(y, reference::softmax(x), kTol.rtol, kTol.atol));
  Tensor dy = random_tensor(s, rng);
  Tensor yr = reference::softmax(x);
  EXPECT_TRUE(all_close(run_op(OpKind::SoftmaxGrad, NoAttrs{}, {dy, yr})[0],
                        reference::softmax_grad(dy, yr), kTol.rtol, kTol.atol));
}

// A single column (y = 1), odd sizes, BERT's attention scores [B, H, S, S] shape, and
// one above the kernels' parallel threshold.
INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxShapeTest,
                         ::testing::Values(Shape{7}, Shape{3, 5}, Shape{4, 1}, Shape{2, 3, 4, 5},
                                           Shape{2, 2, 16, 16}, Shape{40, 1031}),
                         [](const auto& info) {
                           std::string n = "r" + std::to_string(info.param.size());
                           for (int64_t d : info.param) n += "_" + std::to_string(d);
                           return n;
                         });

TEST(SoftmaxOpTest, LargeLogitsDoNotOverflow) {
  // exp(1000) overflows f32 (and double): only exp(x - max) keeps these finite. Row 2 is
  // row 1 shifted by -2000 (same softmax); row 3 masks two entries with -1e9 as attention
  // masks do (their probability is exactly 0 in f32).
  Tensor x = Tensor::from_vector(
      std::vector<float>{1000, 1001, 1002, 999, -1000, -999, -998, -1001, 3, -1e9f, 1, -1e9f},
      {3, 4});
  std::vector<float> y = run_op(OpKind::Softmax, NoAttrs{}, {x})[0].to_float_vector();
  for (float v : y) EXPECT_TRUE(std::isfinite(v)) << v;
  const double e0 = std::exp(-2.0), e1 = std::exp(-1.0), e3 = std::exp(-3.0);
  const double z = e0 + e1 + 1.0 + e3;
  const std::vector<float> row = {float(e0 / z), float(e1 / z), float(1.0 / z), float(e3 / z)};
  const double z2 = 1.0 + std::exp(-2.0);
  const std::vector<float> masked = {float(1.0 / z2), 0.0f, float(std::exp(-2.0) / z2), 0.0f};
  std::vector<float> expected = row;
  expected.insert(expected.end(), row.begin(), row.end());
  expected.insert(expected.end(), masked.begin(), masked.end());
  EXPECT_TRUE(all_close(y, expected, kTol.rtol, kTol.atol));
  EXPECT_EQ(y[9], 0.0f);
  EXPECT_EQ(y[11], 0.0f);
}

TEST(SoftmaxOpTest, RowsSumToOne) {
  Rng rng(2);
  Tensor x = random_tensor({50, 77}, rng, -20.0f, 20.0f);
  std::vector<float> y = run_op(OpKind::Softmax, NoAttrs{}, {x})[0].to_float_vector();
  for (int r = 0; r < 50; ++r) {
    double s = 0;
    for (int i = 0; i < 77; ++i) s += y[size_t(r * 77 + i)];
    EXPECT_NEAR(s, 1.0, 1e-5) << "row " << r;
  }
}

TEST(SoftmaxOpTest, GradientsMatchFiniteDifferences) {
  Rng rng(3);
  EXPECT_TRUE(check_gradients(OpKind::Softmax, NoAttrs{}, {random_tensor({3, 5}, rng, -2, 2)}));
  EXPECT_TRUE(check_gradients(OpKind::Softmax, NoAttrs{}, {random_tensor({2, 2, 6}, rng, -2, 2)}));
  EXPECT_TRUE(check_gradients(OpKind::Softmax, NoAttrs{}, {random_tensor({6}, rng, -2, 2)}));
}

TEST(SoftmaxOpTest, BadShapesAreRejected) {
  Rng rng(4);
  std::string msg =
      error_message([&] { run_op(OpKind::Softmax, NoAttrs{}, {random_tensor({}, rng)}); });
  EXPECT_NE(msg.find("Softmax 'op': logits must have at least one dimension"), std::string::npos)
      << msg;
  msg = error_message([&] {
    run_op(OpKind::SoftmaxGrad, NoAttrs{},
           {random_tensor({2, 3}, rng), random_tensor({3, 2}, rng)});
  });
  EXPECT_NE(msg.find("SoftmaxGrad 'op': dy has shape [2, 3] but y has shape [3, 2]"),
            std::string::npos)
      << msg;
}

TEST(SoftmaxOpTest, ListedAsTensorFlowLists) {
  EXPECT_EQ(op_schema(OpKind::Softmax).amp_list, AmpList::infer);
  EXPECT_EQ(op_schema(OpKind::SoftmaxGrad).amp_list, AmpList::infer);
}

// Softmax in the middle of a tiny classifier: the backward graph holds a SoftmaxGrad and
// 30 SGD steps on one batch reduce the loss, in f32 and with Softmax in bf16 (amp policy).
TEST(SoftmaxOpTest, TinyModelTrainsThroughSoftmax) {
  for (DType low : {DType::f32, DType::bf16}) {
    testing::TinyTraining t;
    // Softmax outputs average 1/16; a fixed factor 16 (a buffer, not trained) gives fc2
    // inputs of order 1, as attention's weighted sums are.
    testing::train_tiny(
        [](Builder& b, ValueId h) {
          ValueId scale = b.variable("scale", {}, Init::constant(16.0f), VariableKind::buffer);
          return b.mul(b.softmax(h), scale);
        },
        low, 30, t);
    EXPECT_TRUE(testing::has_node(t.graph, OpKind::SoftmaxGrad, low)) << dtype_name(low);
    EXPECT_TRUE(testing::has_node(t.graph, OpKind::Softmax, low)) << dtype_name(low);
    EXPECT_LT(t.losses.back(), 0.7f * t.losses.front())
        << dtype_name(low) << ": " << t.losses.front() << " -> " << t.losses.back();
  }
}

}  // namespace
}  // namespace campo
