// Loss ops: SparseSoftmaxCrossEntropyWithLogits and SigmoidCrossEntropyWithLogits (+ its
// gradient op) against the naive references in tests/reference/loss.h, stability at
// logits of +-100 and beyond, label range errors, schema errors, and gradients against
// finite differences.
#include "tests/reference/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::random_tensor;
using testing::run_op;

// A host f32 tensor (a plain from_vector on a braced list of integers would be i32).
Tensor floats(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

// exp/log in f32 against the double reference: a few ulp of the result, so the table's
// f32 tolerance (1.3e-6 relative, 1e-5 absolute) holds.
const testing::Tolerance kF32 = testing::tolerance_for(DType::f32);

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor random_labels(int64_t n, int64_t classes, Rng& rng) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& l : v) l = int32_t(rng.below(uint64_t(classes)));
  return Tensor::from_vector(v, {n});
}

class SoftmaxCrossEntropyTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(SoftmaxCrossEntropyTest, MatchesReference) {
  const auto [N, C] = GetParam();
  Rng rng(1);
  Tensor logits = random_tensor({N, C}, rng, -5, 5);
  Tensor labels = random_labels(N, C, rng);
  std::vector<Tensor> out =
      run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{}, {logits, labels});
  auto [loss, backprop] = reference::sparse_softmax_cross_entropy(logits, labels);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{N}));
  EXPECT_EQ(out[1].shape(), (Shape{N, C}));
  EXPECT_TRUE(all_close(out[0], loss, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(out[1], backprop, kF32.rtol, kF32.atol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SoftmaxCrossEntropyTest,
    ::testing::Values(std::pair<int64_t, int64_t>{1, 1}, std::pair<int64_t, int64_t>{4, 10},
                      std::pair<int64_t, int64_t>{7, 3}, std::pair<int64_t, int64_t>{3, 1000},
                      std::pair<int64_t, int64_t>{512, 100}),
    [](const auto& info) {
      return std::to_string(info.param.first) + "x" + std::to_string(info.param.second);
    });

TEST(SoftmaxCrossEntropyOpTest, LargeLogitsAreStable) {
  // Row 0: the label holds the huge logit (loss 0); row 1: the label holds the tiny one
  // (loss 200); row 2: ties (loss log 3); row 3: far beyond exp's f32 range.
  Tensor logits = floats({100, -100, 0, -100, 100, 0, 5, 5, 5, 1e4f, -1e4f, 3e4f}, {4, 3});
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 0, 1, 0}, {4});
  std::vector<Tensor> out =
      run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{}, {logits, labels});
  std::vector<float> loss = out[0].to_float_vector();
  EXPECT_NEAR(loss[0], 0.0, 1e-6);
  EXPECT_NEAR(loss[1], 200.0, 1e-4);
  EXPECT_NEAR(loss[2], std::log(3.0), 1e-6);
  EXPECT_NEAR(loss[3], 2e4, 1e-2);
  for (float v : out[1].to_float_vector()) EXPECT_TRUE(std::isfinite(v));
  auto [ref_loss, ref_backprop] = reference::sparse_softmax_cross_entropy(logits, labels);
  EXPECT_TRUE(all_close(out[0], ref_loss, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(out[1], ref_backprop, kF32.rtol, kF32.atol));
}

TEST(SoftmaxCrossEntropyOpTest, LabelOutOfRangeNamesLabelAndRow) {
  Rng rng(2);
  Tensor logits = random_tensor({3, 5}, rng);
  std::string msg = error_message([&] {
    run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{},
           {logits, Tensor::from_vector(std::vector<int32_t>{0, 5, 1}, {3})});
  });
  EXPECT_NE(msg.find("label 5 in row 1 is outside [0, 5)"), std::string::npos) << msg;
  msg = error_message([&] {
    run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{},
           {logits, Tensor::from_vector(std::vector<int32_t>{0, 1, -1}, {3})});
  });
  EXPECT_NE(msg.find("label -1 in row 2"), std::string::npos) << msg;
}

TEST(SoftmaxCrossEntropyOpTest, BadShapesAreRejected) {
  Rng rng(3);
  Tensor logits = random_tensor({3, 5}, rng);
  auto ssce = [&](const Tensor& x, const Tensor& l) {
    return error_message([&] {
      run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{}, {x, l});
    });
  };
  std::string msg = ssce(logits, random_labels(4, 5, rng));
  EXPECT_NE(msg.find("labels must be [N] = [3]"), std::string::npos) << msg;
  msg = ssce(random_tensor({3, 5, 1}, rng), random_labels(3, 5, rng));
  EXPECT_NE(msg.find("logits must be [N, C]"), std::string::npos) << msg;
  msg = ssce(logits, random_tensor({3}, rng));
  EXPECT_NE(msg.find("labels must be i32"), std::string::npos) << msg;
}

TEST(SoftmaxCrossEntropyGradTest, MatchesFiniteDifferencesThroughLoss) {
  Rng rng(4);
  Tensor logits = random_tensor({4, 5}, rng, -2, 2);
  Tensor labels = random_labels(4, 5, rng);
  testing::GradCheckOptions opts;
  opts.loss_outputs = {0};
  EXPECT_TRUE(check_gradients(OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{},
                              {logits, labels}, opts));
}

// ---- sigmoid cross entropy ----

TEST(SigmoidCrossEntropyOpTest, MatchesReference) {
  Rng rng(5);
  for (const Shape& s : {Shape{7}, Shape{3, 5}, Shape{}, Shape{2, 3, 40001}}) {
    Tensor x = random_tensor(s, rng, -8, 8), z = random_tensor(s, rng, 0, 1);
    Tensor dloss = random_tensor(s, rng);
    EXPECT_TRUE(all_close(run_op(OpKind::SigmoidCrossEntropyWithLogits, NoAttrs{}, {x, z})[0],
                          reference::sigmoid_cross_entropy(x, z), kF32.rtol, kF32.atol));
    EXPECT_TRUE(
        all_close(run_op(OpKind::SigmoidCrossEntropyWithLogitsGrad, NoAttrs{}, {dloss, x, z})[0],
                  reference::sigmoid_cross_entropy_grad(dloss, x, z), kF32.rtol, kF32.atol));
  }
}

TEST(SigmoidCrossEntropyOpTest, LargeLogitsAreStable) {
  Tensor x = floats({100, -100, 100, -100, 0, 1e4f}, {6});
  Tensor z = floats({1, 0, 0, 1, 0.5f, 0}, {6});
  std::vector<float> loss =
      run_op(OpKind::SigmoidCrossEntropyWithLogits, NoAttrs{}, {x, z})[0].to_float_vector();
  EXPECT_TRUE(all_close(loss, {0, 0, 100, 100, float(std::log(2.0)), 1e4f}, 1e-6, 1e-6));
  Tensor ones = floats({1, 1, 1, 1, 1, 1}, {6});
  std::vector<float> dx =
      run_op(OpKind::SigmoidCrossEntropyWithLogitsGrad, NoAttrs{}, {ones, x, z})[0]
          .to_float_vector();
  EXPECT_TRUE(all_close(dx, {0, 0, 1, -1, 0, 1}, 0, 1e-6));
}

TEST(SigmoidCrossEntropyOpTest, BadShapesAreRejected) {
  Rng rng(6);
  std::string msg = error_message([&] {
    run_op(OpKind::SigmoidCrossEntropyWithLogits, NoAttrs{},
           {random_tensor({3, 4}, rng), random_tensor({4, 3}, rng)});
  });
  EXPECT_NE(msg.find("logits and targets must have the same shape"), std::string::npos) << msg;
}

TEST(SigmoidCrossEntropyGradTest, MatchesFiniteDifferences) {
  Rng rng(7);
  Tensor x = random_tensor({3, 4}, rng, -3, 3), z = random_tensor({3, 4}, rng, 0, 1);
  testing::GradCheckOptions opts;
  opts.check_inputs = {0};  // no gradient w.r.t. the targets
  EXPECT_TRUE(check_gradients(OpKind::SigmoidCrossEntropyWithLogits, NoAttrs{}, {x, z}, opts));
}

}  // namespace
}  // namespace campo
