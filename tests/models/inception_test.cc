// Inception-v3: torchvision's parameter counts (with and without the auxiliary classifier)
// and state_dict names, the input sizes it takes, the auxiliary loss in training graphs,
// and that a few SGD steps on one fixed batch lower its loss.
#include <gtest/gtest.h>

#include "tests/models/model_test_util.h"
#include "train/training_graph.h"

namespace campo {
namespace {

using testing::Built;
using testing::classes;

TEST(InceptionTest, HasTorchvisionParameterCountAndNames) {
  Built m("inception_v3", {2, 3, 299, 299}, classes(1000));  // BN trains on >1 value
  EXPECT_EQ(m.parameters(), 27161264);  // torchvision.models.inception_v3(aux_logits=True)
  EXPECT_EQ(m.graph.value(m.logits).shape, Shape({2, 1000}));
  EXPECT_EQ(m.shape_of("Conv2d_1a_3x3.conv.weight"), Shape({32, 3, 3, 3}));
  EXPECT_FALSE(m.vars.contains("Conv2d_1a_3x3.conv.bias"));
  EXPECT_EQ(m.shape_of("Conv2d_1a_3x3.bn.running_var"), Shape({32}));
  EXPECT_EQ(m.vars.kind("Conv2d_4a_3x3.bn.running_mean"), VariableKind::buffer);
  EXPECT_EQ(m.shape_of("Mixed_5b.branch_pool.conv.weight"), Shape({32, 192, 1, 1}));
  EXPECT_EQ(m.shape_of("Mixed_5d.branch5x5_2.conv.weight"), Shape({64, 48, 5, 5}));
  EXPECT_EQ(m.shape_of("Mixed_6a.branch3x3.conv.weight"), Shape({384, 288, 3, 3}));
  EXPECT_EQ(m.shape_of("Mixed_6b.branch7x7_2.conv.weight"), Shape({128, 128, 1, 7}));
  EXPECT_EQ(m.shape_of("Mixed_6e.branch7x7dbl_4.conv.weight"), Shape({192, 192, 7, 1}));
  EXPECT_EQ(m.shape_of("Mixed_7a.branch7x7x3_4.conv.weight"), Shape({192, 192, 3, 3}));
  EXPECT_EQ(m.shape_of("Mixed_7b.branch3x3dbl_1.conv.weight"), Shape({448, 1280, 1, 1}));
  EXPECT_EQ(m.shape_of("Mixed_7c.branch3x3_2b.conv.weight"), Shape({384, 384, 3, 1}));
  EXPECT_EQ(m.shape_of("AuxLogits.conv0.conv.weight"), Shape({128, 768, 1, 1}));
  EXPECT_EQ(m.shape_of("AuxLogits.conv1.conv.weight"), Shape({768, 128, 5, 5}));
  EXPECT_EQ(m.shape_of("AuxLogits.fc.weight"), Shape({1000, 768}));
  EXPECT_EQ(m.shape_of("fc.weight"), Shape({1000, 2048}));
  EXPECT_EQ(m.shape_of("fc.bias"), Shape({1000}));
  // 3 InceptionA, 1 B, 4 C, 1 D and 2 E blocks (E concatenates twice inside its branches).
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::ConcatV2).size(), 3u + 1 + 4 + 1 + 2 * 3);
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::MaxPool).size(), 4u);  // stem 2, Mixed_6a, 7a
  // BN eps 0.001 everywhere.
  for (NodeId id : m.graph.nodes_of_kind(OpKind::FusedBatchNorm))
    EXPECT_FLOAT_EQ(attrs_as<BatchNormAttrs>(m.graph.node(id).attrs).epsilon, 0.001f);
  // init_weights: N(0, 0.1) convs; AuxLogits.fc N(0, 0.001).
  double sq = 0;
  const std::vector<float> w = m.vars.at("Mixed_7c.branch3x3_2b.conv.weight").to_float_vector();
  for (float v : w) sq += double(v) * v;
  EXPECT_NEAR(std::sqrt(sq / double(w.size())), 0.1, 0.002);
  for (float v : m.vars.at("AuxLogits.fc.weight").to_float_vector()) EXPECT_LT(std::fabs(v), 0.01f);

  ModelOptions no_aux = classes(1000);
  no_aux.aux_logits = false;
  Built plain("inception_v3", {2, 3, 299, 299}, no_aux);
  EXPECT_EQ(plain.parameters(), 23834568);
  EXPECT_FALSE(plain.vars.contains("AuxLogits.fc.weight"));
}

TEST(InceptionTest, SmallerInputsLeaveTheAuxiliaryClassifierOut) {
  // Mixed_6e's map is 17x17 at 299 px: the auxiliary head's 5x5/3 pool and 5x5 conv need
  // it. At 75 px (torchvision's minimum) the model is the aux_logits=False one.
  Built m("inception_v3", {2, 1, 75, 75}, classes(10));
  EXPECT_EQ(m.graph.value(m.logits).shape, Shape({2, 10}));
  EXPECT_FALSE(m.vars.contains("AuxLogits.fc.weight"));
  try {
    Built small("inception_v3", {1, 3, 74, 74}, classes(10));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs images of at least 75x75"), std::string::npos)
        << e.what();
  }
}

TEST(InceptionTest, TrainingLossAddsTheAuxiliaryLossWithWeight04) {
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  TrainingGraphSpec spec;
  spec.model = "inception_v3";
  spec.model_options.in_channels = 3;
  spec.model_options.num_classes = 5;
  spec.image_shape = {3, 299, 299};
  spec.batch = 2;  // the auxiliary head's BN sees a 1x1 map: training needs 2 values
  const TrainingGraphInfo info = build_training_graph(g, vars, spec);
  // loss = Add(mean main xent, Mul(mean aux xent, Const 0.4)).
  const Node& add = g.node(g.value(info.loss).producer);
  ASSERT_EQ(add.kind, OpKind::Add);
  const Node& mul = g.node(g.value(add.inputs[1]).producer);
  ASSERT_EQ(mul.kind, OpKind::Mul);
  const Node& weight = g.node(g.value(mul.inputs[1]).producer);
  ASSERT_EQ(weight.kind, OpKind::Const);
  EXPECT_FLOAT_EQ(attrs_as<ConstAttrs>(weight.attrs).value, 0.4f);
  // One step runs, and the auxiliary classifier is trained.
  CompileOptions co;
  co.fetches = info.fetches();
  Executable exe(g, vars, co);
  Rng rng(5);
  exe.feed("images", testing::random_tensor({2, 3, 299, 299}, rng, -1.0f, 1.0f));
  exe.feed("labels", Tensor::from_vector(std::vector<int32_t>{3, 1}, {2}));
  exe.feed_scalar("loss_scale", 1.0f);
  exe.feed_scalar("lr", 0.01f);
  const std::vector<float> before = vars.at("AuxLogits.fc.weight").to_float_vector();
  exe.run();
  EXPECT_TRUE(std::isfinite(exe.fetch_scalar(info.loss)));
  EXPECT_NE(vars.at("AuxLogits.fc.weight").to_float_vector(), before);
}

// At batch 4 and 75 px (batch norm over 4 values per channel at the 1x1 end) the first steps
// are chaotic: scaling the input by 1 + 1e-6 u moved the third step's loss from 5.5 to 6.8,
// the blocked layout's other rounding moved it to 9.0 (above the first, 7.1), and so did the
// sanitizer build's on a native-BF16 CPU. Whether a loss is lower after 2 steps is therefore
// a property of the rounding, not of the gradients. What holds in every rounding is that
// the model learns the 4 samples: after 12 steps the loss is below chance (ln 10 = 2.3):
// on an AVX-512 machine 5e-4 in plain layout and 0.1 in blocked layout after 10 steps, 1.3
// after 12 in the clang sanitizer build, where the 2nd to 8th steps wander between 1.1 and
// 8.6.
TEST(InceptionTest, TrainingStepsLowerAFixedBatchLoss) {
  const testing::FixedBatchRun r = testing::train_fixed_batch(
      "inception_v3", classes(10), {4, 3, 75, 75}, 12, 0.01f, false, {}, ConvLayout::plain);
  EXPECT_GT(r.first, std::log(10.0f)) << "the untrained model should be no better than chance";
  EXPECT_LT(r.last, std::log(10.0f)) << "first " << r.first << ", last " << r.last;
}

}  // namespace
}  // namespace campo
