// Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter: oneDNN kernels against the naive
// reference (tests/reference/conv.h), gradients against finite differences, and the
// schema's shape errors.
#include "tests/reference/conv.h"

#include <gtest/gtest.h>

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

// oneDNN sums the C/g * kh * kw products per output in another order than the reference
// (blocked GEMM / direct kernels), so the f32 error grows with the reduction length and
// the magnitude of the terms rather than with |result|: the table's 1.3e-6 / 1e-5 is
// loosened to 1e-5 / 1e-4 for these reductions of up to a few hundred terms in [-1, 1].
constexpr double kRtol = 1e-5, kAtol = 1e-4;

ConvAttrs conv_attrs(int stride_h, int stride_w, int pad_h, int pad_w, int dilation = 1,
                     int groups = 1) {
  ConvAttrs a;
  a.stride_h = stride_h, a.stride_w = stride_w;
  a.pad_h = pad_h, a.pad_w = pad_w;
  a.dilation_h = a.dilation_w = dilation;
  a.groups = groups;
  return a;
}

struct ConvCase {
  std::string name;
  Shape x, w;
  ConvAttrs attrs;
};

// The cases run both layout paths of ops/cpu/conv.cc: plain NCHW (1x1 kernels, backprop-input
// into fewer than 16 channels) and oneDNN's blocked layouts with reorders (everything else).
std::vector<ConvCase> conv_cases() {
  return {
      {"1x1", {2, 5, 6, 7}, {4, 5, 1, 1}, conv_attrs(1, 1, 0, 0)},
      {"3x3_stride1_pad1", {2, 3, 8, 8}, {6, 3, 3, 3}, conv_attrs(1, 1, 1, 1)},
      {"3x3_stride2_pad1", {3, 4, 9, 9}, {5, 4, 3, 3}, conv_attrs(2, 2, 1, 1)},
      // (8 - 3) / 2 + 1 = 3 outputs: the last input row and column are never read.
      {"stride2_remainder", {1, 2, 8, 8}, {3, 2, 3, 3}, conv_attrs(2, 2, 0, 0)},
      {"non_square", {1, 3, 7, 10}, {4, 3, 2, 5}, conv_attrs(2, 1, 1, 2)},
      {"dilation2", {2, 3, 9, 9}, {4, 3, 3, 3}, conv_attrs(1, 1, 2, 2, 2)},
      {"groups2", {2, 6, 7, 7}, {4, 3, 3, 3}, conv_attrs(1, 1, 1, 1, 1, 2)},
      {"depthwise", {3, 5, 8, 8}, {5, 1, 3, 3}, conv_attrs(1, 1, 1, 1, 1, 5)},
      {"depthwise_multiplier2_stride2", {1, 4, 9, 9}, {8, 1, 3, 3}, conv_attrs(2, 2, 1, 1, 1, 4)},
      {"resnet_like_7x7_stride2", {1, 3, 32, 32}, {16, 3, 7, 7}, conv_attrs(2, 2, 3, 3)},
      {"wide_channels", {2, 64, 8, 8}, {32, 64, 3, 3}, conv_attrs(1, 1, 1, 1)},
      // Channels that are not multiples of oneDNN's 16-wide blocks (padded blocked layouts).
      {"channels_20_to_24", {2, 20, 7, 7}, {24, 20, 3, 3}, conv_attrs(1, 1, 1, 1)},
      {"groups2_wide", {2, 32, 6, 6}, {32, 16, 3, 3}, conv_attrs(2, 2, 1, 1, 1, 2)},
      {"depthwise_32", {2, 32, 7, 7}, {32, 1, 3, 3}, conv_attrs(1, 1, 1, 1, 1, 32)},
      {"1x1_stride2_wide", {2, 32, 7, 7}, {48, 32, 1, 1}, conv_attrs(2, 2, 0, 0)},
      // The DCGAN discriminator's last layer: one output channel, the kernel covers the input.
      {"single_output_channel", {3, 32, 4, 4}, {1, 32, 4, 4}, conv_attrs(1, 1, 0, 0)},
      // Inception-v3's factorised convolutions: 1x7 / 7x1 with padding (0, 3) / (3, 0) at
      // 17x17, 1x3 / 3x1 with (0, 1) / (1, 0) at 8x8, channels as in its blocks (blocked
      // layouts) and few (plain backprop-input), stride 1 and 2.
      {"inception_1x7_pad_0_3", {2, 32, 17, 17}, {24, 32, 1, 7}, conv_attrs(1, 1, 0, 3)},
      {"inception_7x1_pad_3_0", {2, 24, 17, 17}, {32, 24, 7, 1}, conv_attrs(1, 1, 3, 0)},
      {"inception_1x3_pad_0_1", {2, 16, 8, 8}, {16, 16, 1, 3}, conv_attrs(1, 1, 0, 1)},
      {"inception_3x1_pad_1_0", {2, 16, 8, 8}, {16, 16, 3, 1}, conv_attrs(1, 1, 1, 0)},
      {"1x7_stride2_few_channels", {1, 3, 11, 13}, {4, 3, 1, 7}, conv_attrs(2, 2, 0, 3)},
      {"3x1_stride2_few_channels", {1, 3, 11, 13}, {4, 3, 3, 1}, conv_attrs(2, 2, 1, 0)},
  };
}

class ConvOpTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvOpTest, ForwardMatchesReference) {
  const ConvCase& c = GetParam();
  Rng rng(1);
  Tensor x = random_tensor(c.x, rng), w = random_tensor(c.w, rng);
  std::vector<Tensor> y = run_op(OpKind::Conv2D, c.attrs, {x, w});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_TRUE(all_close(y[0], reference::conv2d(x, w, c.attrs), kRtol, kAtol));
}

TEST_P(ConvOpTest, BackpropInputMatchesReference) {
  const ConvCase& c = GetParam();
  Rng rng(2);
  ConvAttrs a = c.attrs;
  a.output_shape = c.x;
  Tensor w = random_tensor(c.w, rng);
  Tensor dy = random_tensor(reference::conv2d_output_shape(c.x, c.w, a), rng);
  std::vector<Tensor> dx = run_op(OpKind::Conv2DBackpropInput, a, {dy, w});
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_TRUE(all_close(dx[0], reference::conv2d_backprop_input(dy, w, a), kRtol, kAtol));
}

TEST_P(ConvOpTest, BackpropFilterMatchesReference) {
  const ConvCase& c = GetParam();
  Rng rng(3);
  ConvAttrs a = c.attrs;
  a.output_shape = c.w;
  Tensor x = random_tensor(c.x, rng);
  Tensor dy = random_tensor(reference::conv2d_output_shape(c.x, c.w, a), rng);
  std::vector<Tensor> dw = run_op(OpKind::Conv2DBackpropFilter, a, {x, dy});
  ASSERT_EQ(dw.size(), 1u);
  // dw sums over N * Ho * Wo products (up to a few thousand here): error scales likewise.
  EXPECT_TRUE(all_close(dw[0], reference::conv2d_backprop_filter(x, dy, a), kRtol, 4 * kAtol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvOpTest, ::testing::ValuesIn(conv_cases()),
                         [](const auto& info) { return info.param.name; });

// The DCGAN generator's transposed convolution: [N, Cin, H, W] -> [N, Cout, 2H, 2W] with
// kernel 4, stride 2, pad 1 and PyTorch's ConvTranspose2d weight [Cin, Cout, 4, 4].
TEST(ConvOpTest, TransposedConvMatchesReference) {
  Rng rng(4);
  ConvAttrs a = conv_attrs(2, 2, 1, 1);
  a.output_shape = {2, 3, 10, 10};
  Tensor x = random_tensor({2, 8, 5, 5}, rng), w = random_tensor({8, 3, 4, 4}, rng);
  std::vector<Tensor> y = run_op(OpKind::Conv2DBackpropInput, a, {x, w});
  EXPECT_TRUE(all_close(y[0], reference::conv2d_backprop_input(x, w, a), kRtol, kAtol));
}

// Conv2D's output dim of 1 from a kernel as large as the padded input.
TEST(ConvOpTest, KernelCoversWholeInput) {
  Rng rng(5);
  ConvAttrs a = conv_attrs(1, 1, 0, 0);
  Tensor x = random_tensor({2, 3, 4, 4}, rng), w = random_tensor({5, 3, 4, 4}, rng);
  std::vector<Tensor> y = run_op(OpKind::Conv2D, a, {x, w});
  EXPECT_EQ(y[0].shape(), (Shape{2, 5, 1, 1}));
  EXPECT_TRUE(all_close(y[0], reference::conv2d(x, w, a), kRtol, kAtol));
}

// Running a kernel twice on other data must not depend on the first run (handles rebound).
TEST(ConvOpTest, RepeatedRunsAreIndependent) {
  Rng rng(6);
  ConvAttrs a = conv_attrs(1, 1, 1, 1);
  for (int i = 0; i < 2; ++i) {
    Tensor x = random_tensor({1, 2, 5, 5}, rng), w = random_tensor({3, 2, 3, 3}, rng);
    EXPECT_TRUE(
        all_close(run_op(OpKind::Conv2D, a, {x, w})[0], reference::conv2d(x, w, a), kRtol, kAtol));
  }
}

// ---- gradients ----

TEST(ConvGradTest, Conv2DStride1Pad1) {
  Rng rng(10);
  EXPECT_TRUE(
      check_gradients(OpKind::Conv2D, conv_attrs(1, 1, 1, 1),
                      {random_tensor({2, 3, 5, 5}, rng), random_tensor({4, 3, 3, 3}, rng)}));
}

TEST(ConvGradTest, Conv2DGroups2Stride2) {
  Rng rng(11);
  EXPECT_TRUE(
      check_gradients(OpKind::Conv2D, conv_attrs(2, 2, 1, 1, 1, 2),
                      {random_tensor({2, 4, 7, 7}, rng), random_tensor({6, 2, 3, 3}, rng)}));
}

TEST(ConvGradTest, Conv2DDilation2NonSquare) {
  Rng rng(12);
  EXPECT_TRUE(
      check_gradients(OpKind::Conv2D, conv_attrs(1, 2, 2, 1, 2),
                      {random_tensor({1, 2, 7, 8}, rng), random_tensor({3, 2, 3, 2}, rng)}));
}

// Inception-v3's rectangular kernels with one-sided padding, stride 1 and 2: dx and dw of
// Conv2D (so Conv2DBackpropInput and Conv2DBackpropFilter with kh != kw, pad_h != pad_w)
// against finite differences. Odd sizes make stride 2 drop the last row or column.
TEST(ConvGradTest, Conv2DRectangular1x7Pad0x3) {
  for (int stride : {1, 2}) {
    Rng rng(15);
    EXPECT_TRUE(
        check_gradients(OpKind::Conv2D, conv_attrs(stride, stride, 0, 3),
                        {random_tensor({2, 3, 5, 9}, rng), random_tensor({4, 3, 1, 7}, rng)}))
        << "stride " << stride;
  }
}

TEST(ConvGradTest, Conv2DRectangular3x1Pad1x0) {
  for (int stride : {1, 2}) {
    Rng rng(16);
    EXPECT_TRUE(
        check_gradients(OpKind::Conv2D, conv_attrs(stride, stride, 1, 0),
                        {random_tensor({2, 3, 7, 6}, rng), random_tensor({4, 3, 3, 1}, rng)}))
        << "stride " << stride;
  }
}

// The DCGAN generator layer: gradients of both the input and the weight.
TEST(ConvGradTest, TransposedConvStride2Kernel4) {
  Rng rng(13);
  ConvAttrs a = conv_attrs(2, 2, 1, 1);
  a.output_shape = {2, 3, 8, 8};
  EXPECT_TRUE(
      check_gradients(OpKind::Conv2DBackpropInput, a,
                      {random_tensor({2, 4, 4, 4}, rng), random_tensor({4, 3, 4, 4}, rng)}));
}

TEST(ConvGradTest, BackpropFilter) {
  Rng rng(14);
  ConvAttrs a = conv_attrs(2, 2, 1, 1);
  a.output_shape = {4, 3, 3, 3};
  EXPECT_TRUE(
      check_gradients(OpKind::Conv2DBackpropFilter, a,
                      {random_tensor({2, 3, 6, 6}, rng), random_tensor({2, 4, 3, 3}, rng)}));
}

// ---- shape errors: campo::Error naming the op and the shapes ----

// Runs f and expects a campo::Error whose message contains every part.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected campo::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message '" << msg << "' lacks '" << p << "'";
  }
}

TEST(ConvShapeTest, ChannelMismatch) {
  Rng rng(20);
  Tensor x = random_tensor({1, 3, 5, 5}, rng), w = random_tensor({4, 2, 3, 3}, rng);
  expect_error(
      [&] {
        run_op(OpKind::Conv2D, conv_attrs(1, 1, 1, 1), {x, w});
      },
      {"Conv2D", "channel", "[1, 3, 5, 5]", "[4, 2, 3, 3]"});
}

TEST(ConvShapeTest, GroupsMustDivideChannels) {
  Rng rng(21);
  Tensor x = random_tensor({1, 6, 5, 5}, rng), w = random_tensor({4, 2, 3, 3}, rng);
  expect_error(
      [&] {
        run_op(OpKind::Conv2D, conv_attrs(1, 1, 1, 1, 1, 4), {x, w});
      },
      {"Conv2D", "groups 4", "[1, 6, 5, 5]"});
  // 6 input channels split in 3 groups of 2, but 4 output channels do not split in 3.
  expect_error(
      [&] {
        run_op(OpKind::Conv2D, conv_attrs(1, 1, 1, 1, 1, 3), {x, w});
      },
      {"Conv2D", "groups 3", "[4, 2, 3, 3]"});
}

TEST(ConvShapeTest, KernelLargerThanInput) {
  Rng rng(22);
  Tensor x = random_tensor({1, 1, 2, 2}, rng), w = random_tensor({1, 1, 5, 5}, rng);
  expect_error(
      [&] {
        run_op(OpKind::Conv2D, conv_attrs(1, 1, 0, 0), {x, w});
      },
      {"Conv2D", "[1, 1, 2, 2]", "[1, 1, 5, 5]"});
}

TEST(ConvShapeTest, NotRank4) {
  Rng rng(23);
  Tensor x = random_tensor({3, 5, 5}, rng), w = random_tensor({4, 3, 3, 3}, rng);
  expect_error(
      [&] {
        run_op(OpKind::Conv2D, conv_attrs(1, 1, 1, 1), {x, w});
      },
      {"Conv2D", "[3, 5, 5]"});
}

TEST(ConvShapeTest, BadStride) {
  Rng rng(24);
  Tensor x = random_tensor({1, 3, 5, 5}, rng), w = random_tensor({4, 3, 3, 3}, rng);
  expect_error(
      [&] {
        run_op(OpKind::Conv2D, conv_attrs(0, 1, 1, 1), {x, w});
      },
      {"Conv2D", "stride"});
}

TEST(ConvShapeTest, BackpropInputOutputShapeMismatch) {
  Rng rng(25);
  ConvAttrs a = conv_attrs(2, 2, 1, 1);
  a.output_shape = {2, 3, 9, 9};  // conv of [2, 3, 9, 9] with a 4x4 kernel gives 4x4, not 5x5
  Tensor x = random_tensor({2, 4, 5, 5}, rng), w = random_tensor({4, 3, 4, 4}, rng);
  expect_error(
      [&] {
        run_op(OpKind::Conv2DBackpropInput, a, {x, w});
      },
      {"Conv2DBackpropInput", "[2, 4, 5, 5]", "[2, 3, 9, 9]", "[4, 3, 4, 4]"});
  a.output_shape = {2, 5, 10, 10};  // 5 output channels but w gives 3
  expect_error(
      [&] {
        run_op(OpKind::Conv2DBackpropInput, a, {x, w});
      },
      {"Conv2DBackpropInput", "channel", "[2, 5, 10, 10]", "[4, 3, 4, 4]"});
}

TEST(ConvShapeTest, BackpropFilterDyMismatch) {
  Rng rng(26);
  ConvAttrs a = conv_attrs(1, 1, 1, 1);
  a.output_shape = {4, 3, 3, 3};
  Tensor x = random_tensor({2, 3, 6, 6}, rng), dy = random_tensor({2, 4, 5, 5}, rng);
  expect_error(
      [&] {
        run_op(OpKind::Conv2DBackpropFilter, a, {x, dy});
      },
      {"Conv2DBackpropFilter", "[2, 4, 5, 5]", "[2, 3, 6, 6]", "[4, 3, 3, 3]"});
}

}  // namespace
}  // namespace campo
