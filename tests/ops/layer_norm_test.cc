// LayerNorm / LayerNormGrad: the CPU kernels against the double-precision reference
// (tests/reference/layer_norm.h) on several shapes, gradients against finite differences,
// the schema's lists and errors, layers::layer_norm's variables (PyTorch's names), and a
// tiny model trained through autodiff in f32 and under the amp policy in bf16. bf16 / f16
// against f32 on the same rounded inputs: tests/ops/low_precision_test.cc (LayerNorm*).
#include "tests/reference/layer_norm.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "models/layers.h"
#include "ops/schema.h"
#include "tests/gradcheck.h"
#include "tests/ops/tiny_training.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

struct LnInputs {
  Tensor x, scale, offset;
  std::vector<Tensor> all() const { return {x, scale, offset}; }
};

// Rows with a mean far from 0 (x in [2, 5]) so that a one-pass variance would cancel.
LnInputs random_ln_inputs(const Shape& x_shape, uint64_t seed) {
  Rng rng(seed);
  const int64_t c = x_shape.back();
  return {random_tensor(x_shape, rng, 2.0f, 5.0f), random_tensor({c}, rng, 0.5f, 1.5f),
          random_tensor({c}, rng, -0.5f, 0.5f)};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Tolerance kF32 = tolerance_for(DType::f32);

class LayerNormShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(LayerNormShapes, ForwardAndGradMatchReference) {
  const LnInputs in = random_ln_inputs(GetParam(), 1);
  const float eps = 1e-5f;
  auto out = run_op(OpKind::LayerNorm, LayerNormAttrs{eps}, in.all());
  auto ref = reference::layer_norm(in.x, in.scale, in.offset, eps);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(all_close(out[0], ref.y, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(out[1], ref.mean, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(out[2], ref.inv_std, kF32.rtol, kF32.atol));
  EXPECT_EQ(out[1].dtype(), DType::f32);

  Rng rng(2);
  Tensor dy = random_tensor(GetParam(), rng);
  auto grad = run_op(OpKind::LayerNormGrad, LayerNormAttrs{eps},
                     {dy, in.x, in.scale, ref.mean, ref.inv_std});
  auto gref = reference::layer_norm_grad(dy, in.x, in.scale, eps);
  ASSERT_EQ(grad.size(), 3u);
  EXPECT_TRUE(all_close(grad[0], gref.dx, kF32.rtol, kF32.atol));
  // dscale and doffset sum over every row: f32 products summed in double, then rounded.
  EXPECT_TRUE(all_close(grad[1], gref.dscale, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(grad[2], gref.doffset, kF32.rtol, kF32.atol));
}

// Rank 1 (one row, scalar statistics), one feature (y = offset), odd sizes, BERT's
// [batch, sequence, hidden] with hidden 768 (parallel, more rows than gradient chunks).
INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormShapes,
                         ::testing::Values(Shape{7}, Shape{4, 1}, Shape{3, 5}, Shape{2, 3, 8},
                                           Shape{2, 50, 768}),
                         [](const auto& info) {
                           std::string n = "r" + std::to_string(info.param.size());
                           for (int64_t d : info.param) n += "_" + std::to_string(d);
                           return n;
                         });

TEST(LayerNormOp, BertEpsilonNormalisesRows) {
  // eps = 1e-12 (BERT): each row of y has mean offset and, with scale 1, variance ~1.
  LnInputs in = random_ln_inputs({6, 32}, 3);
  for (int64_t i = 0; i < 32; ++i) in.scale.data_as<float>()[i] = 1.0f;
  for (int64_t i = 0; i < 32; ++i) in.offset.data_as<float>()[i] = 0.0f;
  std::vector<float> y =
      run_op(OpKind::LayerNorm, LayerNormAttrs{1e-12f}, in.all())[0].to_float_vector();
  for (int r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 32; ++i) m += y[size_t(r * 32 + i)];
    m /= 32;
    for (int i = 0; i < 32; ++i) v += (y[size_t(r * 32 + i)] - m) * (y[size_t(r * 32 + i)] - m);
    EXPECT_NEAR(m, 0.0, 1e-6) << "row " << r;
    EXPECT_NEAR(v / 32, 1.0, 1e-5) << "row " << r;
  }
}

TEST(LayerNormGradients, MatchFiniteDifferences) {
  for (const Shape& s : {Shape{3, 5}, Shape{2, 2, 4}, Shape{6}}) {
    const LnInputs in = random_ln_inputs(s, 4);
    GradCheckOptions opts;
    opts.check_inputs = {0, 1, 2};
    opts.loss_outputs = {0};
    EXPECT_TRUE(check_gradients(OpKind::LayerNorm, LayerNormAttrs{1e-5f}, in.all(), opts))
        << shape_str(s);
  }
}

TEST(LayerNormSchema, StatisticsStayF32AndOpIsInferList) {
  const OpSchema& s = op_schema(OpKind::LayerNorm);
  EXPECT_EQ(s.amp_list, AmpList::infer);
  EXPECT_EQ(s.fp32_inputs, (std::vector<int>{1, 2}));
  EXPECT_FALSE(s.has_side_effects);
  const OpSchema& gs = op_schema(OpKind::LayerNormGrad);
  EXPECT_EQ(gs.amp_list, AmpList::infer);
  EXPECT_EQ(gs.fp32_inputs, (std::vector<int>{2, 3, 4}));
}

TEST(LayerNormSchema, BadShapesAndEpsilonThrowNamingTheOp) {
  LnInputs in = random_ln_inputs({2, 3, 4}, 5);
  Rng rng(6);
  LnInputs bad_scale = in;
  bad_scale.scale = random_tensor({3}, rng);
  std::string msg = error_of([&] { run_op(OpKind::LayerNorm, LayerNormAttrs{}, bad_scale.all()); });
  EXPECT_NE(msg.find("LayerNorm 'op': scale has shape [3], expected [4] (the last axis of x "
                     "[2, 3, 4])"),
            std::string::npos)
      << msg;
  LnInputs bad_offset = in;
  bad_offset.offset = random_tensor({4, 1}, rng);
  msg = error_of([&] { run_op(OpKind::LayerNorm, LayerNormAttrs{}, bad_offset.all()); });
  EXPECT_NE(msg.find("offset has shape [4, 1]"), std::string::npos) << msg;
  LnInputs scalar = in;
  scalar.x = random_tensor({}, rng);
  msg = error_of([&] { run_op(OpKind::LayerNorm, LayerNormAttrs{}, scalar.all()); });
  EXPECT_NE(msg.find("x must have at least one dimension"), std::string::npos) << msg;
  msg = error_of([&] { run_op(OpKind::LayerNorm, LayerNormAttrs{-1.0f}, in.all()); });
  EXPECT_NE(msg.find("epsilon must be finite and >= 0, got -1"), std::string::npos) << msg;

  const Tensor stats = random_tensor({2, 3}, rng, 0.5f, 1.0f);
  msg = error_of([&] {
    run_op(OpKind::LayerNormGrad, LayerNormAttrs{},
           {random_tensor({2, 3, 5}, rng), in.x, in.scale, stats, stats});
  });
  EXPECT_NE(msg.find("LayerNormGrad 'op': dy has shape [2, 3, 5] but x has shape [2, 3, 4]"),
            std::string::npos)
      << msg;
  msg = error_of([&] {
    run_op(OpKind::LayerNormGrad, LayerNormAttrs{},
           {in.x, in.x, in.scale, random_tensor({6}, rng), stats});
  });
  EXPECT_NE(msg.find("expected [2, 3] (x's shape without the last axis)"), std::string::npos)
      << msg;
}

TEST(LayerNormLayer, CreatesPyTorchNamedWeightAndBias) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 5, 12});
  ValueId y;
  {
    auto s = b.scope("encoder");
    y = layers::layer_norm(b, x, "LayerNorm", 1e-12f);
  }
  EXPECT_EQ(g.value(y).shape, (Shape{2, 5, 12}));
  ASSERT_TRUE(vars.contains("encoder.LayerNorm.weight"));
  ASSERT_TRUE(vars.contains("encoder.LayerNorm.bias"));
  EXPECT_EQ(vars.at("encoder.LayerNorm.weight").to_float_vector(), std::vector<float>(12, 1.0f));
  EXPECT_EQ(vars.at("encoder.LayerNorm.bias").to_float_vector(), std::vector<float>(12, 0.0f));
  const Node& n = g.node(g.value(y).producer);
  EXPECT_EQ(n.kind, OpKind::LayerNorm);
  EXPECT_EQ(attrs_as<LayerNormAttrs>(n.attrs).epsilon, 1e-12f);
}

// LayerNorm in the middle of a tiny classifier: the backward graph holds a LayerNormGrad,
// and 30 SGD steps on one batch reduce the loss, in f32 and with LayerNorm in bf16 (amp).
TEST(LayerNormLayer, TinyModelTrainsThroughLayerNorm) {
  for (DType low : {DType::f32, DType::bf16}) {
    TinyTraining t;
    train_tiny([](Builder& b, ValueId h) { return layers::layer_norm(b, h, "ln", 1e-12f); }, low,
               30, t);
    EXPECT_TRUE(has_node(t.graph, OpKind::LayerNormGrad, low)) << dtype_name(low);
    EXPECT_TRUE(has_node(t.graph, OpKind::LayerNorm, low)) << dtype_name(low);
    EXPECT_LT(t.losses.back(), 0.7f * t.losses.front())
        << dtype_name(low) << ": " << t.losses.front() << " -> " << t.losses.back();
  }
}

}  // namespace
}  // namespace campo::testing
