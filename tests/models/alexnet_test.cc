// AlexNet: torchvision's parameter count and state_dict names, the small-image variant, and
// that a few SGD steps on one fixed batch lower its loss.
#include <gtest/gtest.h>

#include "tests/models/model_test_util.h"

namespace campo {
namespace {

using testing::Built;
using testing::classes;

TEST(AlexNetTest, HasTorchvisionParameterCountAndNames) {
  Built m("alexnet", {1, 3, 224, 224}, classes(1000));
  EXPECT_EQ(m.parameters(), 61100840);  // sum(p.numel()) of torchvision.models.alexnet()
  EXPECT_EQ(m.vars.names_of_kind(VariableKind::parameter).size(), 16u);
  EXPECT_EQ(m.graph.value(m.logits).shape, Shape({1, 1000}));
  EXPECT_EQ(m.shape_of("features.0.weight"), Shape({64, 3, 11, 11}));
  EXPECT_EQ(m.shape_of("features.3.weight"), Shape({192, 64, 5, 5}));
  EXPECT_EQ(m.shape_of("features.6.weight"), Shape({384, 192, 3, 3}));
  EXPECT_EQ(m.shape_of("features.8.weight"), Shape({256, 384, 3, 3}));
  EXPECT_EQ(m.shape_of("features.10.weight"), Shape({256, 256, 3, 3}));
  EXPECT_EQ(m.shape_of("features.10.bias"), Shape({256}));
  EXPECT_EQ(m.shape_of("classifier.1.weight"), Shape({4096, 9216}));
  EXPECT_EQ(m.shape_of("classifier.4.weight"), Shape({4096, 4096}));
  EXPECT_EQ(m.shape_of("classifier.6.weight"), Shape({1000, 4096}));
  EXPECT_EQ(m.shape_of("classifier.6.bias"), Shape({1000}));
  EXPECT_EQ(m.stride_of("features.0.weight"), 4);
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::MaxPool).size(), 3u);
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::AvgPool).size(), 0u);  // 6x6 map: no pooling
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::Dropout).size(), 2u);
  // PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
  for (float v : m.vars.at("features.0.bias").to_float_vector())
    EXPECT_LE(std::fabs(v), 1.0f / std::sqrt(3.0f * 121));
  for (float v : m.vars.at("classifier.1.weight").to_float_vector())
    EXPECT_LE(std::fabs(v), 1.0f / std::sqrt(9216.0f));

  // AdaptiveAvgPool2d((6, 6)) on the 12x12 map of a 416 px input is a 2x2/2 average pool.
  Built large("alexnet", {1, 3, 416, 416}, classes(1000), m.store);
  ASSERT_EQ(large.graph.nodes_of_kind(OpKind::AvgPool).size(), 1u);
  EXPECT_EQ(large.parameters(), 61100840);
}

TEST(AlexNetTest, ImagenetHeadNeedsAMultipleOfSix) {
  try {
    Built m("alexnet", {1, 3, 64, 64}, classes(10));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pools the feature map to 6x6"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Built("alexnet", {1, 3, 12, 12}, classes(10)), Error);
}

TEST(AlexNetTest, SmallVariantShapesAndNames) {
  for (const Shape& images : {Shape{2, 1, 28, 28}, Shape{2, 3, 32, 32}}) {
    SCOPED_TRACE(shape_str(images));
    Built m("alexnet", images, classes(10));
    EXPECT_EQ(m.graph.value(m.logits).shape, Shape({2, 10}));
    EXPECT_EQ(m.shape_of("features.0.weight"), Shape({64, images[1], 3, 3}));
    EXPECT_EQ(m.stride_of("features.0.weight"), 1);
    EXPECT_EQ(m.shape_of("classifier.1.weight"), Shape({512, 256}));
    EXPECT_EQ(m.shape_of("classifier.4.weight"), Shape({512, 512}));
    EXPECT_EQ(m.shape_of("classifier.6.weight"), Shape({10, 512}));
    EXPECT_EQ(m.graph.nodes_of_kind(OpKind::MaxPool).size(), 3u);
    // He-normal convs (fan_in, relu): std sqrt(2 / (384 * 3 * 3)) for features.8.
    const std::vector<float> w = m.vars.at("features.8.weight").to_float_vector();
    double sq = 0;
    for (float v : w) sq += double(v) * v;
    EXPECT_NEAR(std::sqrt(sq / double(w.size())), std::sqrt(2.0 / (384 * 9)), 0.001);
    for (float v : m.vars.at("features.8.bias").to_float_vector()) EXPECT_EQ(v, 0.0f);
  }
}

TEST(AlexNetTest, SmallVariantTrainingStepsLowerAFixedBatchLoss) {
  const testing::FixedBatchRun r =
      testing::train_fixed_batch("alexnet", classes(10), {4, 3, 32, 32}, 5, 0.01f, true);
  EXPECT_NEAR(r.first, std::log(10.0f), 0.2f);
  EXPECT_LT(r.last, r.first - 0.02f) << "first " << r.first << ", last " << r.last;
}

}  // namespace
}  // namespace campo
