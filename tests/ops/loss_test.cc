// Loss ops: SparseSoftmaxCrossEntropyWithLogits and SigmoidCrossEntropyWithLogits (+ its
// gradient op) against the naive references in tests/reference/loss.h, stability at
// logits of +-100 and beyond, label range errors, schema errors, gradients against finite
// differences, and the ignore_label of masked targets.
#include "tests/reference/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "ops/op.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::error_message;

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

// ---- ignore_label (masked targets) ----

const SparseSoftmaxCrossEntropyAttrs kIgnoreMinus100{-100};

// Rows labelled -100 get loss 0 and a zero backprop row; the others are what they are
// without the option, and their mean (the masked-LM loss) matches the reference's mean over
// those rows alone.
TEST(SoftmaxCrossEntropyIgnoreTest, IgnoredRowsAreZeroAndTheRestMatchTheReference) {
  Rng rng(11);
  const int64_t N = 6, C = 7;
  Tensor logits = random_tensor({N, C}, rng, -4, 4);
  const std::vector<int32_t> labels = {3, -100, 0, 6, -100, 2};
  const std::vector<Tensor> out =
      run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, kIgnoreMinus100,
             {logits, Tensor::from_vector(labels, {N})});
  // Reference on the rows that count only.
  std::vector<int64_t> kept;
  for (int64_t n = 0; n < N; ++n)
    if (labels[size_t(n)] != -100) kept.push_back(n);
  std::vector<float> kept_logits;
  std::vector<int32_t> kept_labels;
  for (int64_t n : kept) {
    for (int64_t c = 0; c < C; ++c) kept_logits.push_back(logits.data_as<float>()[n * C + c]);
    kept_labels.push_back(labels[size_t(n)]);
  }
  const int64_t K = int64_t(kept.size());
  auto [ref_loss, ref_backprop] = reference::sparse_softmax_cross_entropy(
      floats(kept_logits, {K, C}), Tensor::from_vector(kept_labels, {K}));
  const std::vector<float> loss = out[0].to_float_vector(), bp = out[1].to_float_vector();
  std::vector<float> kept_loss, kept_bp;
  double sum = 0;
  for (int64_t n = 0; n < N; ++n) {
    const bool ignored = labels[size_t(n)] == -100;
    if (ignored) {
      EXPECT_EQ(loss[size_t(n)], 0.0f) << "row " << n;
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(bp[size_t(n * C + c)], 0.0f) << "row " << n;
      continue;
    }
    kept_loss.push_back(loss[size_t(n)]);
    for (int64_t c = 0; c < C; ++c) kept_bp.push_back(bp[size_t(n * C + c)]);
    sum += loss[size_t(n)];
  }
  EXPECT_TRUE(all_close(kept_loss, ref_loss.to_float_vector(), kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(kept_bp, ref_backprop.to_float_vector(), kF32.rtol, kF32.atol));
  double ref_mean = 0;
  for (float v : ref_loss.to_float_vector()) ref_mean += v;
  ref_mean /= double(K);
  EXPECT_NEAR(sum / double(K), ref_mean, 1e-5 * std::fabs(ref_mean) + 1e-6);
}

// Unset, nothing changes: NoAttrs and an unset ignore_label agree bit for bit, and -100 is
// out of range like any other negative label.
TEST(SoftmaxCrossEntropyIgnoreTest, UnsetIsTodaysBehaviour) {
  Rng rng(12);
  Tensor logits = random_tensor({4, 5}, rng, -3, 3);
  Tensor labels = random_labels(4, 5, rng);
  const auto plain =
      run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{}, {logits, labels});
  const auto unset = run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits,
                            SparseSoftmaxCrossEntropyAttrs{}, {logits, labels});
  const auto with =
      run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, kIgnoreMinus100, {logits, labels});
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_TRUE(all_close(unset[k], plain[k], 0, 0)) << "output " << k;
    EXPECT_TRUE(all_close(with[k], plain[k], 0, 0)) << "output " << k;  // no -100 in labels
  }
  const std::string msg = error_message([&] {
    run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyAttrs{},
           {logits, Tensor::from_vector(std::vector<int32_t>{0, -100, 1, 2}, {4})});
  });
  EXPECT_NE(msg.find("label -100 in row 1 is outside [0, 5)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("ignore_label"), std::string::npos) << msg;
}

// With an ignore_label, any other label outside [0, C) stays an error, and says so.
TEST(SoftmaxCrossEntropyIgnoreTest, OtherOutOfRangeLabelsStayErrors) {
  Rng rng(13);
  Tensor logits = random_tensor({3, 5}, rng);
  for (int32_t bad : {5, -1, -99}) {
    const std::string msg = error_message([&] {
      run_op(OpKind::SparseSoftmaxCrossEntropyWithLogits, kIgnoreMinus100,
             {logits, Tensor::from_vector(std::vector<int32_t>{-100, 0, bad}, {3})});
    });
    EXPECT_NE(msg.find("label " + std::to_string(bad) +
                       " in row 2 is outside [0, 5) and is not the ignore_label -100"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The gradient w.r.t. the logits, with two of five rows ignored (their rows get none).
TEST(SoftmaxCrossEntropyIgnoreTest, GradientMatchesFiniteDifferencesWithRowsIgnored) {
  Rng rng(14);
  Tensor logits = random_tensor({5, 4}, rng, -2, 2);
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, -100, 3, -100, 0}, {5});
  testing::GradCheckOptions opts;
  opts.loss_outputs = {0};
  EXPECT_TRUE(check_gradients(OpKind::SparseSoftmaxCrossEntropyWithLogits, kIgnoreMinus100,
                              {logits, labels}, opts));
}

// Builder: without ignore_label the node is what it always was (no attributes, the same
// graph text); with it, the attribute is on the node and in the text.
TEST(SoftmaxCrossEntropyIgnoreTest, BuilderSetsTheAttributeOnlyWhenGiven) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId logits = b.placeholder("logits", {4, 3});
  ValueId labels = b.placeholder("labels", {4}, DType::i32);
  const Node& plain = g.node(g.value(b.sparse_softmax_cross_entropy(logits, labels)).producer);
  EXPECT_TRUE(std::holds_alternative<NoAttrs>(plain.attrs));
  const Node& masked =
      g.node(g.value(b.sparse_softmax_cross_entropy(logits, labels, -100)).producer);
  EXPECT_EQ(ignore_label_of(masked.attrs), std::optional<int32_t>(-100));
  const std::string text = g.to_text();
  EXPECT_NE(text.find("SparseSoftmaxCrossEntropyWithLogits<f32>(v0, v1) -> v2:f32[4]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("SparseSoftmaxCrossEntropyWithLogits<f32>(v0, v1) ignore_label=-100 -> "),
            std::string::npos)
      << text;
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
