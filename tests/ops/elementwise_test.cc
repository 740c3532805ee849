// Element-wise ops (activations and their gradients, Add, AddN, Mul, Dropout) and Reshape:
// CPU kernels against the naive references in tests/reference/elementwise.h on several
// shapes (odd sizes, a scalar, one large enough for the multithreaded path), edge cases
// (ReLU's kink, NaN, saturating Tanh/Sigmoid), gradients against finite differences, and
// bad shapes rejected by the schemas with a readable campo::Error.
#include "tests/reference/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "ops/kernel.h"
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
using testing::tolerance_for;

// A host f32 tensor (a plain from_vector on a braced list of integers would be i32).
Tensor floats(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

const testing::Tolerance kF32 = tolerance_for(DType::f32);

// Shapes: odd sizes, a scalar, a size-1 tensor and one above the parallel threshold (2^15)
// that is not a multiple of any vector width.
std::vector<Shape> shapes() { return {{7}, {3, 5}, {2, 3, 4, 5}, {}, {1}, {3, 17, 1031}}; }

std::string shape_name(const Shape& s) {
  std::string name = "r" + std::to_string(s.size());
  for (int64_t d : s) name += "_" + std::to_string(d);
  return name;
}

// A tensor with values in [lo, hi] of random sign: |x| >= lo keeps finite differences of
// ReLU-like ops away from their kink at 0.
Tensor away_from_zero(const Shape& shape, Rng& rng, float lo = 0.1f, float hi = 1.0f) {
  Tensor t = random_tensor(shape, rng, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (rng.uniform() < 0.5f) t.data_as<float>()[i] *= -1.0f;
  return t;
}

class ElementwiseShapeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ElementwiseShapeTest, ActivationsMatchReference) {
  Rng rng(1);
  const Shape& s = GetParam();
  Tensor x = random_tensor(s, rng, -4.0f, 4.0f);
  Tensor dy = random_tensor(s, rng);
  EXPECT_TRUE(all_close(run_op(OpKind::Relu, NoAttrs{}, {x})[0], reference::relu(x), 0, 0));
  EXPECT_TRUE(all_close(run_op(OpKind::LeakyRelu, LeakyReluAttrs{0.2f}, {x})[0],
                        reference::leaky_relu(x, 0.2f), kF32.rtol, kF32.atol));
  // oneDNN's JIT tanh / logistic are within a few ulp of the double reference.
  EXPECT_TRUE(
      all_close(run_op(OpKind::Tanh, NoAttrs{}, {x})[0], reference::tanh(x), kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(run_op(OpKind::Sigmoid, NoAttrs{}, {x})[0], reference::sigmoid(x),
                        kF32.rtol, kF32.atol));
  Tensor y = reference::relu(x);
  EXPECT_TRUE(all_close(run_op(OpKind::ReluGrad, NoAttrs{}, {dy, y})[0],
                        reference::relu_grad(dy, y), 0, 0));
  EXPECT_TRUE(all_close(run_op(OpKind::LeakyReluGrad, LeakyReluAttrs{0.01f}, {dy, x})[0],
                        reference::leaky_relu_grad(dy, x, 0.01f), kF32.rtol, kF32.atol));
  Tensor t = reference::tanh(x);
  EXPECT_TRUE(all_close(run_op(OpKind::TanhGrad, NoAttrs{}, {dy, t})[0],
                        reference::tanh_grad(dy, t), kF32.rtol, kF32.atol));
  Tensor sg = reference::sigmoid(x);
  EXPECT_TRUE(all_close(run_op(OpKind::SigmoidGrad, NoAttrs{}, {dy, sg})[0],
                        reference::sigmoid_grad(dy, sg), kF32.rtol, kF32.atol));
}

TEST_P(ElementwiseShapeTest, SumsAndProductsMatchReference) {
  Rng rng(2);
  const Shape& s = GetParam();
  Tensor a = random_tensor(s, rng), b = random_tensor(s, rng), c = random_tensor(s, rng);
  Tensor d = random_tensor(s, rng), e = random_tensor(s, rng);
  // Add and Mul are exact in f32 (one rounding, as the reference's float result).
  EXPECT_TRUE(all_close(run_op(OpKind::Add, NoAttrs{}, {a, b})[0], reference::add_n({a, b}), 0, 0));
  EXPECT_TRUE(all_close(run_op(OpKind::Mul, NoAttrs{}, {a, b})[0], reference::mul(a, b), 0, 0));
  EXPECT_TRUE(all_close(run_op(OpKind::AddN, NoAttrs{}, {a})[0], a, 0, 0));
  EXPECT_TRUE(all_close(run_op(OpKind::AddN, NoAttrs{}, {a, b, c})[0], reference::add_n({a, b, c}),
                        kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(run_op(OpKind::AddN, NoAttrs{}, {a, b, c, d, e})[0],
                        reference::add_n({a, b, c, d, e}), kF32.rtol, kF32.atol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ElementwiseShapeTest, ::testing::ValuesIn(shapes()),
                         [](const auto& info) { return shape_name(info.param); });

TEST(ElementwiseOpTest, ReluKinkAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = floats({-2.0f, -0.0f, 0.0f, 1e-30f, 3.0f, nan}, {6});
  std::vector<float> y = run_op(OpKind::Relu, NoAttrs{}, {x})[0].to_float_vector();
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 1e-30f);
  EXPECT_EQ(y[4], 3.0f);
  EXPECT_TRUE(std::isnan(y[5])) << "Relu must propagate NaN so loss scaling sees it";
  // The gradient at the kink (y == 0) is 0.
  Tensor dy = floats({1, 1, 1, 1, 1, 1}, {6});
  Tensor yt = floats({0.0f, 0.0f, 0.0f, 1e-30f, 3.0f, 0.0f}, {6});
  EXPECT_EQ(run_op(OpKind::ReluGrad, NoAttrs{}, {dy, yt})[0].to_float_vector(),
            (std::vector<float>{0, 0, 0, 1, 1, 0}));
  // LeakyRelu at 0 takes the alpha branch: dX = alpha dY.
  Tensor x0 = floats({0.0f, -1.0f, 2.0f}, {3});
  EXPECT_EQ(run_op(OpKind::LeakyReluGrad, LeakyReluAttrs{0.25f}, {floats({4, 4, 4}, {3}), x0})[0]
                .to_float_vector(),
            (std::vector<float>{1, 1, 4}));
}

TEST(ElementwiseOpTest, TanhAndSigmoidSaturate) {
  Tensor x = floats({-100.0f, -20.0f, 0.0f, 20.0f, 100.0f}, {5});
  EXPECT_TRUE(
      all_close(run_op(OpKind::Tanh, NoAttrs{}, {x})[0], floats({-1, -1, 0, 1, 1}, {5}), 0, 1e-7));
  std::vector<float> s = run_op(OpKind::Sigmoid, NoAttrs{}, {x})[0].to_float_vector();
  EXPECT_TRUE(all_close(s, {0, 2.0611537e-9f, 0.5f, 1, 1}, 1e-5, 1e-12));
  for (float v : s) EXPECT_TRUE(std::isfinite(v));
}

struct MulCase {
  Shape a, b;
};

class MulBroadcastTest : public ::testing::TestWithParam<MulCase> {};

TEST_P(MulBroadcastTest, ForwardMatchesReference) {
  Rng rng(3);
  Tensor a = random_tensor(GetParam().a, rng), b = random_tensor(GetParam().b, rng);
  std::vector<Tensor> out = run_op(OpKind::Mul, NoAttrs{}, {a, b});
  EXPECT_EQ(out[0].shape(), GetParam().a);
  EXPECT_TRUE(all_close(out[0], reference::mul(a, b), 0, 0));
}

TEST_P(MulBroadcastTest, GradientsMatchFiniteDifferences) {
  Rng rng(4);
  Tensor a = random_tensor(GetParam().a, rng), b = random_tensor(GetParam().b, rng);
  EXPECT_TRUE(check_gradients(OpKind::Mul, NoAttrs{}, {a, b}));
}

INSTANTIATE_TEST_SUITE_P(Cases, MulBroadcastTest,
                         ::testing::Values(MulCase{{4, 3}, {4, 3}}, MulCase{{4, 3}, {}},
                                           MulCase{{5, 3}, {5}}, MulCase{{2, 3, 2, 2}, {2, 3}},
                                           MulCase{{3, 1, 2}, {3, 1}}, MulCase{{}, {}},
                                           MulCase{{6}, {}}),
                         [](const auto& info) {
                           return shape_name(info.param.a) + "_times_" + shape_name(info.param.b);
                         });

TEST(ElementwiseOpTest, MulLargePrefixBroadcast) {
  // Both parallel paths: many rows ([300] x [300, 200]) and few long rows ([2] x [2, 40000]).
  Rng rng(5);
  for (const MulCase& c : {MulCase{{300, 200}, {300}}, MulCase{{2, 40000}, {2}}}) {
    Tensor a = random_tensor(c.a, rng), b = random_tensor(c.b, rng);
    EXPECT_TRUE(all_close(run_op(OpKind::Mul, NoAttrs{}, {a, b})[0], reference::mul(a, b), 0, 0));
  }
}

TEST(ElementwiseOpTest, BadShapesAreRejected) {
  Rng rng(6);
  Tensor a = random_tensor({2, 3}, rng), b = random_tensor({3, 2}, rng);
  std::string msg = error_message([&] { run_op(OpKind::Add, NoAttrs{}, {a, b}); });
  EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  msg = error_message([&] { run_op(OpKind::AddN, NoAttrs{}, {a, a, b}); });
  EXPECT_NE(msg.find("input 2"), std::string::npos) << msg;
  msg = error_message([&] { run_op(OpKind::ReluGrad, NoAttrs{}, {a, b}); });
  EXPECT_NE(msg.find("shapes must match"), std::string::npos) << msg;
  // [3] is a suffix of [2, 3], not a prefix: not a supported broadcast.
  msg = error_message([&] { run_op(OpKind::Mul, NoAttrs{}, {a, random_tensor({3}, rng)}); });
  EXPECT_NE(msg.find("does not broadcast"), std::string::npos) << msg;
  msg = error_message([&] { run_op(OpKind::Mul, NoAttrs{}, {random_tensor({2}, rng), a}); });
  EXPECT_NE(msg.find("does not broadcast"), std::string::npos) << msg;
  msg = error_message([&] { run_op(OpKind::AddN, NoAttrs{}, {}); });
  EXPECT_NE(msg.find("at least one input"), std::string::npos) << msg;
}

// ---- gradients ----

TEST(ElementwiseGradTest, Activations) {
  Rng rng(7);
  EXPECT_TRUE(check_gradients(OpKind::Relu, NoAttrs{}, {away_from_zero({3, 5}, rng)}));
  EXPECT_TRUE(
      check_gradients(OpKind::LeakyRelu, LeakyReluAttrs{0.2f}, {away_from_zero({2, 7}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::Tanh, NoAttrs{}, {random_tensor({4, 3}, rng, -2, 2)}));
  EXPECT_TRUE(check_gradients(OpKind::Sigmoid, NoAttrs{}, {random_tensor({4, 3}, rng, -3, 3)}));
}

TEST(ElementwiseGradTest, Sums) {
  Rng rng(8);
  Tensor a = random_tensor({3, 4}, rng), b = random_tensor({3, 4}, rng);
  Tensor c = random_tensor({3, 4}, rng);
  EXPECT_TRUE(check_gradients(OpKind::Add, NoAttrs{}, {a, b}));
  EXPECT_TRUE(check_gradients(OpKind::AddN, NoAttrs{}, {a, b, c}));
  EXPECT_TRUE(check_gradients(OpKind::AddN, NoAttrs{}, {a, b}));
}

// ---- Dropout ----

std::vector<Tensor> run_dropout(const Tensor& x, float rate, uint64_t seed) {
  ExecContext ctx;
  ctx.rng.reseed(seed);
  TensorDesc d{x.shape(), DType::f32};
  return run_op_eager(OpKind::Dropout, DropoutAttrs{rate}, DType::f32, {x}, {d, d}, ctx);
}

TEST(DropoutOpTest, MaskValuesFractionAndProduct) {
  Rng rng(9);
  Tensor x = random_tensor({5, 40001}, rng);  // 200005 elements: parallel, odd tail block
  for (float rate : {0.1f, 0.5f, 0.8f}) {
    std::vector<Tensor> out = run_dropout(x, rate, 42);
    const float scale = 1.0f / (1.0f - rate);
    const float* y = out[0].data_as<float>();
    const float* mask = out[1].data_as<float>();
    int64_t dropped = 0;
    bool values_ok = true, product_ok = true;
    for (int64_t i = 0; i < x.numel(); ++i) {
      values_ok &= mask[i] == 0.0f || mask[i] == scale;
      product_ok &= y[i] == x.data_as<float>()[i] * mask[i];
      dropped += mask[i] == 0.0f;
    }
    EXPECT_TRUE(values_ok) << "mask values must be 0 or 1/(1-rate) = " << scale;
    EXPECT_TRUE(product_ok) << "y must be x * mask";
    // Binomial standard deviation at n = 2e5 is at most 0.0011: 0.005 is > 4 sigma.
    EXPECT_NEAR(double(dropped) / double(x.numel()), rate, 0.005) << "rate " << rate;
  }
}

TEST(DropoutOpTest, SameSeedSameMask) {
  Rng rng(10);
  Tensor x = random_tensor({1000, 70}, rng);
  std::vector<float> m1 = run_dropout(x, 0.3f, 7)[1].to_float_vector();
  std::vector<float> m2 = run_dropout(x, 0.3f, 7)[1].to_float_vector();
  std::vector<float> m3 = run_dropout(x, 0.3f, 8)[1].to_float_vector();
  EXPECT_EQ(m1, m2);
  EXPECT_NE(m1, m3);
  // Successive runs on one context draw fresh masks.
  ExecContext ctx;
  TensorDesc d{x.shape(), DType::f32};
  auto first = run_op_eager(OpKind::Dropout, DropoutAttrs{0.3f}, DType::f32, {x}, {d, d}, ctx);
  auto second = run_op_eager(OpKind::Dropout, DropoutAttrs{0.3f}, DType::f32, {x}, {d, d}, ctx);
  EXPECT_NE(first[1].to_float_vector(), second[1].to_float_vector());
}

TEST(DropoutOpTest, RateZeroKeepsEverythingAndBadRateIsRejected) {
  Rng rng(11);
  Tensor x = random_tensor({3, 7}, rng);
  std::vector<Tensor> out = run_dropout(x, 0.0f, 1);
  EXPECT_TRUE(all_close(out[0], x, 0, 0));
  std::string msg = error_message([&] { run_op(OpKind::Dropout, DropoutAttrs{1.0f}, {x}); });
  EXPECT_NE(msg.find("rate must be in [0, 1)"), std::string::npos) << msg;
}

TEST(DropoutOpTest, GradientMatchesFiniteDifferences) {
  // check_gradients reseeds the context's RNG before every run, so the mask is fixed.
  Rng rng(12);
  EXPECT_TRUE(check_gradients(OpKind::Dropout, DropoutAttrs{0.4f}, {random_tensor({4, 6}, rng)}));
}

// ---- Dropout with per-slice rates (a model array: model s owns block s of axis 1) ----

std::vector<Tensor> run_sliced_dropout(const Tensor& x, std::vector<float> rates, uint64_t seed) {
  ExecContext ctx;
  ctx.rng.reseed(seed);
  TensorDesc d{x.shape(), DType::f32};
  return run_op_eager(OpKind::Dropout, DropoutAttrs{0.5f, std::move(rates)}, DType::f32, {x},
                      {d, d}, ctx);
}

TEST(DropoutOpTest, SliceRatesKeepTheirFractionsAndScales) {
  Rng rng(30);
  const std::vector<float> rates = {0.0f, 0.5f, 0.9f};
  const int64_t outer = 64, width = 40;  // x [64, 3 * 40]: 2560 elements per slice
  Tensor x = random_tensor({outer, 3 * width}, rng);
  std::vector<Tensor> out = run_sliced_dropout(x, rates, 5);
  const float* xs = x.data_as<float>();
  const float* y = out[0].data_as<float>();
  const float* mask = out[1].data_as<float>();
  for (int s = 0; s < 3; ++s) {
    const float scale = 1.0f / (1.0f - rates[size_t(s)]);
    int64_t kept = 0;
    bool exact = true;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < width; ++k) {
        const int64_t i = (o * 3 + s) * width + k;
        const bool keep = mask[i] != 0.0f;
        kept += keep;
        exact &= keep ? mask[i] == scale && y[i] == xs[i] * scale : y[i] == 0.0f;
      }
    EXPECT_TRUE(exact) << "slice " << s << ": kept values must be x * 1/(1-rate), dropped 0";
    // Binomial standard deviation of the kept fraction over 2560 draws is at most 0.0099
    // (rate 0.5): 0.05 is more than 5 sigma.
    EXPECT_NEAR(double(kept) / double(outer * width), 1.0 - rates[size_t(s)], 0.05)
        << "slice " << s;
    if (s == 0) EXPECT_EQ(kept, outer * width) << "rate 0 keeps every element";
  }
  // Slice 0 (rate 0) is untouched, bit for bit.
  for (int64_t o = 0; o < outer; ++o)
    EXPECT_EQ(std::memcmp(y + o * 3 * width, xs + o * 3 * width, width * sizeof(float)), 0);
}

TEST(DropoutOpTest, SliceRatesFollowAxisOneOfHigherRanks) {
  // x [4, 2 * 3, 5, 5]: slice s is channels [3 s, 3 s + 3) of every sample.
  Rng rng(31);
  Tensor x = random_tensor({4, 6, 5, 5}, rng);
  std::vector<Tensor> out = run_sliced_dropout(x, {0.0f, 0.75f}, 6);
  const float* mask = out[1].data_as<float>();
  bool slice0_kept = true, slice1_values = true;
  int64_t dropped1 = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool in_slice1 = (i / 25) % 6 >= 3;
    if (!in_slice1) slice0_kept &= mask[i] == 1.0f;
    if (in_slice1) slice1_values &= mask[i] == 0.0f || mask[i] == 4.0f;
    if (in_slice1) dropped1 += mask[i] == 0.0f;
  }
  EXPECT_TRUE(slice0_kept);
  EXPECT_TRUE(slice1_values);
  EXPECT_GT(dropped1, 0);
}

TEST(DropoutOpTest, EqualSliceRatesGiveTheScalarRatesMask) {
  // Same draws, same rate: the per-slice path adds nothing of its own (200000 elements: the
  // parallel blocks too).
  Rng rng(32);
  Tensor x = random_tensor({50, 4000}, rng);
  EXPECT_EQ(run_sliced_dropout(x, {0.3f, 0.3f, 0.3f, 0.3f}, 9)[1].to_float_vector(),
            run_dropout(x, 0.3f, 9)[1].to_float_vector());
}

TEST(DropoutOpTest, SliceRatesGradientUsesTheForwardMask) {
  Rng rng(33);
  EXPECT_TRUE(check_gradients(OpKind::Dropout, DropoutAttrs{0.5f, {0.0f, 0.5f, 0.9f}},
                              {random_tensor({4, 6}, rng)}));
  // Through autodiff: d sum(dropout(x)) / dx is exactly the mask of the same run.
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {8, 6});
  ValueId y = b.dropout(x, std::vector<float>{0.0f, 0.5f, 0.9f});
  const Node& drop = g.node(g.value(y).producer);
  ASSERT_EQ(drop.kind, OpKind::Dropout);
  ValueId mask = drop.outputs[1];
  ValueId dx = append_gradients(b, b.sum(y), b.constant(1.0f), {x})[0];
  Executable exe(g, vars, CompileOptions{.fetches = {mask, dx}, .seed = 4});
  exe.feed("x", random_tensor({8, 6}, rng));
  exe.run();
  EXPECT_EQ(exe.fetch(dx).to_float_vector(), exe.fetch(mask).to_float_vector());
}

TEST(DropoutOpTest, SliceRatesErrors) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId flat = b.placeholder("flat", {12});
  ValueId odd = b.placeholder("odd", {4, 10});
  ValueId ok = b.placeholder("ok", {4, 9});
  std::string msg = error_message([&] { b.dropout(flat, std::vector<float>{0.1f, 0.2f}); });
  EXPECT_NE(msg.find("2 slice rates need x of rank >= 2 with dim 1 divisible by 2, got [12]"),
            std::string::npos)
      << msg;
  msg = error_message([&] { b.dropout(odd, std::vector<float>{0.1f, 0.2f, 0.3f}); });
  EXPECT_NE(msg.find("dim 1 divisible by 3, got [4, 10]"), std::string::npos) << msg;
  msg = error_message([&] { b.dropout(ok, std::vector<float>{0.1f, 1.0f, 0.3f}); });
  EXPECT_NE(msg.find("slice rate 1 must be in [0, 1), got 1"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::Dropout, {ok}, DropoutAttrs{0.5f, {0.1f, 0.2f, -0.1f}}, "drop");
  });
  EXPECT_NE(msg.find("Dropout 'drop': slice rate 2 must be in [0, 1), got -0.1"), std::string::npos)
      << msg;
  msg = error_message([&] { b.dropout(ok, std::vector<float>{}); });
  EXPECT_NE(msg.find("no slice rates"), std::string::npos) << msg;
  // All rates 0, or inference: the identity, no node.
  EXPECT_EQ(b.dropout(ok, std::vector<float>{0.0f, 0.0f, 0.0f}), ok);
  b.set_training(false);
  EXPECT_EQ(b.dropout(ok, std::vector<float>{0.5f, 0.5f, 0.5f}), ok);
}

// ---- Reshape ----

TEST(ReshapeOpTest, CopiesAndInfersMinusOne) {
  Rng rng(13);
  Tensor x = random_tensor({2, 3, 4}, rng);
  std::vector<Tensor> out = run_op(OpKind::Reshape, ReshapeAttrs{{6, -1}}, {x});
  EXPECT_EQ(out[0].shape(), (Shape{6, 4}));
  EXPECT_EQ(out[0].to_float_vector(), x.to_float_vector());
  EXPECT_EQ(run_op(OpKind::Reshape, ReshapeAttrs{{-1}}, {x})[0].shape(), (Shape{24}));
  EXPECT_EQ(run_op(OpKind::Reshape, ReshapeAttrs{{4, 1, -1, 2}}, {x})[0].shape(),
            (Shape{4, 1, 3, 2}));
  EXPECT_EQ(run_op(OpKind::Reshape, ReshapeAttrs{{}}, {random_tensor({1, 1}, rng)})[0].shape(),
            Shape{});
  // Integer tensors keep their dtype.
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {2, 2});
  out = run_op(OpKind::Reshape, ReshapeAttrs{{4}}, {labels});
  EXPECT_EQ(out[0].dtype(), DType::i32);
  EXPECT_EQ(out[0].to_float_vector(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(ReshapeOpTest, MismatchesAreRejected) {
  Rng rng(14);
  Tensor x = random_tensor({2, 3, 4}, rng);
  std::string msg = error_message([&] { run_op(OpKind::Reshape, ReshapeAttrs{{5, 5}}, {x}); });
  EXPECT_NE(msg.find("cannot reshape [2, 3, 4] (24 elements) to [5, 5] (25 elements)"),
            std::string::npos)
      << msg;
  msg = error_message([&] { run_op(OpKind::Reshape, ReshapeAttrs{{5, -1}}, {x}); });
  EXPECT_NE(msg.find("-1 cannot be inferred"), std::string::npos) << msg;
  msg = error_message([&] { run_op(OpKind::Reshape, ReshapeAttrs{{-1, -1}}, {x}); });
  EXPECT_NE(msg.find("more than one -1"), std::string::npos) << msg;
  msg = error_message([&] { run_op(OpKind::Reshape, ReshapeAttrs{{-2, 12}}, {x}); });
  EXPECT_NE(msg.find("negative dimension"), std::string::npos) << msg;
}

TEST(ReshapeOpTest, GradientMatchesFiniteDifferences) {
  Rng rng(15);
  EXPECT_TRUE(
      check_gradients(OpKind::Reshape, ReshapeAttrs{{3, -1}}, {random_tensor({2, 3, 2}, rng)}));
}

}  // namespace
}  // namespace campo
