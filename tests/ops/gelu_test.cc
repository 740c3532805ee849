// Gelu / GeluGrad, exact (erf) and approximate (tanh): the CPU kernels against the
// double-precision reference (tests/reference/gelu.h) on several shapes and at known
// values, gradients against finite differences, and a tiny model trained through autodiff
// in f32 and under the amp policy in bf16. bf16 / f16 against f32 on the same rounded
// inputs: tests/ops/low_precision_test.cc (cases Gelu*, GeluGrad*).
#include "tests/reference/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/schema.h"
#include "tests/gradcheck.h"
#include "tests/ops/tiny_training.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::random_tensor;
using testing::run_op;

// oneDNN's gelu_erf / gelu_tanh evaluate erf, exp and tanh with their own polynomial
// approximations: within a few f32 ulp of the double reference, inside the f32 table.
const testing::Tolerance kTol = testing::tolerance_for(DType::f32);

struct GeluCase {
  Shape shape;
  bool approximate;
};

class GeluShapeTest : public ::testing::TestWithParam<GeluCase> {};

TEST_P(GeluShapeTest, ForwardAndGradMatchReference) {
  Rng rng(1);
  const auto& [s, approximate] = GetParam();
  Tensor x = random_tensor(s, rng, -6.0f, 6.0f);
  Tensor dy = random_tensor(s, rng);
  EXPECT_TRUE(all_close(run_op(OpKind::Gelu, GeluAttrs{approximate}, {x})[0],
                        reference::gelu(x, approximate), kTol.rtol, kTol.atol));
  EXPECT_TRUE(all_close(run_op(OpKind::GeluGrad, GeluAttrs{approximate}, {dy, x})[0],
                        reference::gelu_grad(dy, x, approximate), kTol.rtol, kTol.atol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GeluShapeTest,
                         ::testing::Values(GeluCase{{7}, false}, GeluCase{{3, 5}, true},
                                           GeluCase{{2, 3, 4, 5}, false},
                                           GeluCase{{2, 3, 4, 5}, true}, GeluCase{{}, false},
                                           GeluCase{{3, 17, 1031}, false},
                                           GeluCase{{3, 17, 1031}, true}),
                         [](const auto& info) {
                           std::string n = info.param.approximate ? "tanh_r" : "erf_r";
                           n += std::to_string(info.param.shape.size());
                           for (int64_t d : info.param.shape) n += "_" + std::to_string(d);
                           return n;
                         });

TEST(GeluOpTest, KnownValues) {
  // gelu(0) = 0, gelu(1) = Phi(1) = 0.8413447460685429, gelu(-1) = -(1 - Phi(1)),
  // large |x|: x and 0. The two forms differ visibly at x = 1 (tanh form 0.8411920).
  Tensor x = Tensor::from_vector(std::vector<float>{0.0f, 1.0f, -1.0f, 30.0f, -30.0f}, {5});
  std::vector<float> exact = run_op(OpKind::Gelu, GeluAttrs{false}, {x})[0].to_float_vector();
  EXPECT_TRUE(all_close(exact, {0.0f, 0.8413447f, -0.1586553f, 30.0f, 0.0f}, kTol.rtol, kTol.atol));
  std::vector<float> tanh_form = run_op(OpKind::Gelu, GeluAttrs{true}, {x})[0].to_float_vector();
  EXPECT_TRUE(
      all_close(tanh_form, {0.0f, 0.8411920f, -0.1588080f, 30.0f, 0.0f}, kTol.rtol, kTol.atol));
  for (float v : exact) EXPECT_TRUE(std::isfinite(v));
  // gelu'(0) = 0.5 for both forms.
  Tensor zero = Tensor::from_vector(std::vector<float>{0.0f}, {1});
  Tensor one = Tensor::from_vector(std::vector<float>{1.0f}, {1});
  for (bool approximate : {false, true})
    EXPECT_NEAR(
        run_op(OpKind::GeluGrad, GeluAttrs{approximate}, {one, zero})[0].to_float_vector()[0], 0.5f,
        1e-6);
}

TEST(GeluOpTest, GradientsMatchFiniteDifferences) {
  Rng rng(2);
  for (bool approximate : {false, true})
    EXPECT_TRUE(
        check_gradients(OpKind::Gelu, GeluAttrs{approximate}, {random_tensor({4, 5}, rng, -3, 3)}))
        << (approximate ? "tanh" : "erf");
}

TEST(GeluOpTest, ListedAsItsTensorFlowComposition) {
  EXPECT_EQ(op_schema(OpKind::Gelu).amp_list, AmpList::infer);
  EXPECT_EQ(op_schema(OpKind::GeluGrad).amp_list, AmpList::infer);
}

// Gelu in the middle of a tiny classifier: the backward graph holds a GeluGrad with the
// forward's form and 30 SGD steps on one batch reduce the loss, in f32 and bf16 (amp).
TEST(GeluOpTest, TinyModelTrainsThroughGelu) {
  for (bool approximate : {false, true})
    for (DType low : {DType::f32, DType::bf16}) {
      testing::TinyTraining t;
      testing::train_tiny([=](Builder& b, ValueId h) { return b.gelu(h, approximate); }, low, 30,
                          t);
      ASSERT_TRUE(testing::has_node(t.graph, OpKind::GeluGrad, low)) << dtype_name(low);
      for (NodeId id : t.graph.nodes_of_kind(OpKind::GeluGrad))
        EXPECT_EQ(attrs_as<GeluAttrs>(t.graph.node(id).attrs).approximate, approximate);
      EXPECT_TRUE(testing::has_node(t.graph, OpKind::Gelu, low)) << dtype_name(low);
      EXPECT_LT(t.losses.back(), 0.7f * t.losses.front())
          << dtype_name(low) << ": " << t.losses.front() << " -> " << t.losses.back();
    }
}

}  // namespace
}  // namespace campo
