// models/layers: nn.Conv2d with rectangular kernels and padding (Inception-v3's 1x7, 7x1,
// 1x3, 3x1): weight shapes, PyTorch's default initialisation from the real fan-in, the
// convolution's attributes and output shape, and its values against the reference.
#include "models/layers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph/executor.h"
#include "tests/reference/conv.h"
#include "tests/test_util.h"

namespace campo {
namespace {

// max |v| over a variable.
float max_abs(const VariableStore& vars, const std::string& name) {
  float m = 0;
  for (float v : vars.at(name).to_float_vector()) m = std::max(m, std::fabs(v));
  return m;
}

// The attributes of the Conv2D that computes y (through a BiasAdd where the layer has one).
ConvAttrs conv_attrs_of(const Graph& g, ValueId y) {
  const Node* n = &g.node(g.value(y).producer);
  if (n->kind == OpKind::BiasAdd) n = &g.node(g.value(n->inputs[0]).producer);
  EXPECT_EQ(n->kind, OpKind::Conv2D);
  return n->kind == OpKind::Conv2D ? attrs_as<ConvAttrs>(n->attrs) : ConvAttrs{};
}

TEST(ConvLayerTest, RectangularKernelShapesAndPadding) {
  Graph g;
  VariableStore vars(3, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {2, 4, 17, 12});
  // Inception's branch7x7: 1x7 with padding (0, 3), then 7x1 with (3, 0): 17x12 kept.
  const ValueId y1 = layers::conv2d(
      b, x,
      {.out_channels = 6, .bias = false, .kernel_h = 1, .kernel_w = 7, .pad_h = 0, .pad_w = 3},
      "b7_2");
  const ValueId y2 = layers::conv2d(
      b, y1, {.out_channels = 5, .kernel_h = 7, .kernel_w = 1, .pad_h = 3, .pad_w = 0}, "b7_3");
  // 3x1 with (1, 0) at stride 2: Ho = (17 + 2 - 3) / 2 + 1 = 9, Wo = (12 - 1) / 2 + 1 = 6.
  const ValueId y3 = layers::conv2d(
      b, x, {.out_channels = 3, .stride = 2, .kernel_h = 3, .kernel_w = 1, .pad_h = 1, .pad_w = 0},
      "b3_2b");
  // Square fields still apply where a rectangular one is absent: kernel 3 -> 3x1, pad 1 -> 1x0.
  const ValueId y4 = layers::conv2d(
      b, x, {.out_channels = 2, .kernel = 3, .pad = 1, .kernel_w = 1, .pad_w = 0}, "mixed");
  EXPECT_EQ(vars.at("b7_2.weight").shape(), (Shape{6, 4, 1, 7}));
  EXPECT_FALSE(vars.contains("b7_2.bias"));
  EXPECT_EQ(vars.at("b7_3.weight").shape(), (Shape{5, 6, 7, 1}));
  EXPECT_EQ(vars.at("b7_3.bias").shape(), (Shape{5}));
  EXPECT_EQ(vars.at("b3_2b.weight").shape(), (Shape{3, 4, 3, 1}));
  EXPECT_EQ(vars.at("mixed.weight").shape(), (Shape{2, 4, 3, 1}));
  EXPECT_EQ(b.shape(y1), (Shape{2, 6, 17, 12}));
  EXPECT_EQ(b.shape(y2), (Shape{2, 5, 17, 12}));
  EXPECT_EQ(b.shape(y3), (Shape{2, 3, 9, 6}));
  EXPECT_EQ(b.shape(y4), (Shape{2, 2, 17, 12}));
  const ConvAttrs a1 = conv_attrs_of(g, y1);
  EXPECT_EQ(a1.pad_h, 0);
  EXPECT_EQ(a1.pad_w, 3);
  const ConvAttrs a3 = conv_attrs_of(g, y3);
  EXPECT_EQ(a3.pad_h, 1);
  EXPECT_EQ(a3.pad_w, 0);
  EXPECT_EQ(a3.stride_h, 2);
  EXPECT_EQ(a3.stride_w, 2);
}

// PyTorch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups * kh * kw:
// for 1x7 from 8 channels that is 56 (bound 0.134), where kernel * kernel would give a
// bound sqrt(7) times smaller or larger. The He-normal init uses fan_out likewise.
TEST(ConvLayerTest, RectangularKernelInitUsesTheRealFans) {
  Graph g;
  VariableStore vars(4, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {1, 8, 9, 9});
  layers::conv2d(b, x, {.out_channels = 32, .kernel_h = 1, .kernel_w = 7, .pad_w = 3}, "c");
  const float bound = 1.0f / std::sqrt(8.0f * 1 * 7);
  EXPECT_LE(max_abs(vars, "c.weight"), bound);
  EXPECT_GT(max_abs(vars, "c.weight"), 0.95f * bound);  // 1792 uniform draws reach the edge
  EXPECT_LE(max_abs(vars, "c.bias"), bound);
  // Grouped: fan_in = 8 / 2 * 3 * 1 = 12.
  layers::conv2d(b, x, {.out_channels = 64, .groups = 2, .kernel_h = 3, .kernel_w = 1, .pad_h = 1},
                 "grouped");
  const float grouped_bound = 1.0f / std::sqrt(12.0f);
  EXPECT_LE(max_abs(vars, "grouped.weight"), grouped_bound);
  EXPECT_GT(max_abs(vars, "grouped.weight"), 0.95f * grouped_bound);
  // kaiming: std sqrt(2 / (out / groups * kh * kw)) = sqrt(2 / (64 * 7)).
  layers::conv2d(
      b, x, {.out_channels = 64, .kaiming = true, .kernel_h = 7, .kernel_w = 1, .pad_h = 3}, "he");
  const std::vector<float> w = vars.at("he.weight").to_float_vector();
  double sq = 0;
  for (float v : w) sq += double(v) * v;
  const double expected_std = std::sqrt(2.0 / (64 * 7));
  EXPECT_NEAR(std::sqrt(sq / double(w.size())), expected_std, 0.05 * expected_std);
}

// The layer computes the reference convolution with its rectangular geometry.
TEST(ConvLayerTest, RectangularKernelForwardMatchesReference) {
  Graph g;
  VariableStore vars(5, default_cpu_backend());
  Builder b(g, vars);
  const Shape xs{2, 3, 9, 10};
  const ValueId x = b.placeholder("x", xs);
  const ValueId y = layers::conv2d(
      b, x,
      {.out_channels = 4, .stride = 2, .bias = false, .kernel_h = 1, .kernel_w = 7, .pad_w = 3},
      "c");
  CompileOptions co;
  co.fetches = {y};
  Executable exe(g, vars, co);
  Rng rng(6);
  const Tensor xin = testing::random_tensor(xs, rng);
  exe.input("x").copy_from(xin);
  exe.run();
  const Tensor expected = reference::conv2d(xin, vars.at("c.weight"), conv_attrs_of(g, y));
  EXPECT_EQ(expected.shape(), (Shape{2, 4, 5, 5}));
  EXPECT_TRUE(testing::all_close(exe.output(y), expected, 1e-5, 1e-4));
}

TEST(ConvLayerTest, BadRectangularGeometryIsAnError) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {1, 2, 5, 5});
  try {
    layers::conv2d(b, x, {.out_channels = 2, .kernel_h = 0, .kernel_w = 3}, "bad");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv layer 'bad': kernel 0x3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace campo
