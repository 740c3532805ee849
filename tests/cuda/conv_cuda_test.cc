// The CUDA convolution kernels (ops/cuda/conv.cc, cuDNN) against the CPU kernels on the same
// inputs, per dtype: Conv2D, Conv2DBackpropInput (also as DCGAN's transposed convolution),
// Conv2DBackpropFilter (also writing an f32 dw from low-precision data), with the geometries
// the models use, and the channel-padded f16 / bf16 kernels (pad_to). Skipped, saying why,
// without a GPU.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|):
//  - f32: both sum the same f32 products (cuDNN with CUDNN_FMA_MATH: no TF32) in another order,
//    so the difference grows with the reduction length (C/g * kh * kw forward and
//    backward-data, N * Ho * Wo backward-filter) and with the terms, not with |result|:
//    rtol 1e-4 and atol 1e-4 (inputs in [-1, 1], reductions of up to ~2,500 terms).
//  - f16 / bf16: identical inputs on both sides; both accumulate in f32 (cuDNN's tensor-op
//    math with f32 compute; the CPU widens to f32) and round once, so the results differ by the
//    f32 reordering above before rounding, plus at most one ulp of the dtype on each side's
//    rounding: rtol 2 ulp (f16 2^-9, bf16 2^-6) and the f32 term atol 1e-4.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/conv_padding.h"
#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/reference/conv.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;
using testing::Tolerance;

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

Tolerance conv_tolerance(DType t) {
  switch (t) {
    case DType::f16:
      return {1.0 / 512, 1e-4};
    case DType::bf16:
      return {1.0 / 64, 1e-4};
    default:
      return {1e-4, 1e-4};
  }
}

ConvAttrs conv_attrs(int stride, int pad, int dilation = 1, int groups = 1) {
  ConvAttrs a;
  a.stride_h = a.stride_w = stride;
  a.pad_h = a.pad_w = pad;
  a.dilation_h = a.dilation_w = dilation;
  a.groups = groups;
  return a;
}

struct ConvCase {
  std::string name;
  Shape x, w;
  ConvAttrs attrs;
};

// Odd batch and spatial sizes, so no dimension is a multiple of a tile.
std::vector<ConvCase> conv_cases() {
  return {
      {"resnet_stem_7x7_stride2", {3, 3, 33, 33}, {16, 3, 7, 7}, conv_attrs(2, 3)},
      {"resnet_3x3", {2, 16, 15, 15}, {24, 16, 3, 3}, conv_attrs(1, 1)},
      {"resnet_1x1_stride2_downsample", {3, 16, 15, 15}, {32, 16, 1, 1}, conv_attrs(2, 0)},
      {"resnet_1x1", {2, 32, 7, 7}, {16, 32, 1, 1}, conv_attrs(1, 0)},
      {"dcgan_discriminator_4x4_stride2", {3, 3, 16, 16}, {8, 3, 4, 4}, conv_attrs(2, 1)},
      {"stride2_remainder", {1, 5, 8, 8}, {3, 5, 3, 3}, conv_attrs(2, 0)},
      {"dilation2", {2, 3, 11, 11}, {4, 3, 3, 3}, conv_attrs(1, 2, 2)},
      {"groups2", {2, 6, 9, 9}, {4, 3, 3, 3}, conv_attrs(1, 1, 1, 2)},
      {"depthwise", {3, 5, 10, 10}, {5, 1, 3, 3}, conv_attrs(1, 1, 1, 5)},
      {"depthwise_multiplier2_stride2", {1, 4, 9, 9}, {8, 1, 3, 3}, conv_attrs(2, 1, 1, 4)},
      {"lenet_array_groups3", {2, 3, 12, 12}, {18, 1, 5, 5}, conv_attrs(1, 0, 1, 3)},
  };
}

TEST(ConvCudaTest, Conv2DMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const ConvCase& c : conv_cases())
    for (DType t : kDtypes) {
      Rng rng(11);
      const Tensor x = random_tensor_of(t, c.x, rng);
      const Tensor w = random_tensor_of(t, c.w, rng);
      const Shape y = reference::conv2d_output_shape(c.x, c.w, c.attrs);
      EXPECT_TRUE(
          cuda_matches_cpu(*gpu, OpKind::Conv2D, c.attrs, t, {x, w}, {{y, t}}, conv_tolerance(t)))
          << c.name;
    }
}

TEST(ConvCudaTest, Conv2DBackpropInputMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const ConvCase& c : conv_cases())
    for (DType t : kDtypes) {
      Rng rng(12);
      ConvAttrs a = c.attrs;
      a.output_shape = c.x;
      const Tensor dy = random_tensor_of(t, reference::conv2d_output_shape(c.x, c.w, a), rng);
      const Tensor w = random_tensor_of(t, c.w, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Conv2DBackpropInput, a, t, {dy, w}, {{c.x, t}},
                                   conv_tolerance(t)))
          << c.name;
    }
}

TEST(ConvCudaTest, Conv2DBackpropFilterMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const ConvCase& c : conv_cases())
    for (DType t : kDtypes) {
      Rng rng(13);
      ConvAttrs a = c.attrs;
      a.output_shape = c.w;
      const Tensor x = random_tensor_of(t, c.x, rng);
      const Tensor dy = random_tensor_of(t, reference::conv2d_output_shape(c.x, c.w, a), rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Conv2DBackpropFilter, a, t, {x, dy}, {{c.w, t}},
                                   conv_tolerance(t)))
          << c.name;
    }
}

// A low-precision backprop-filter node with Node::f32_output writes dw in f32 (cuDNN's dw in
// the data's type, widened exactly): the f16/bf16 tolerance, since the f32 dw carries the
// rounding to the data's type on the GPU and none on the CPU where oneDNN writes f32 directly.
TEST(ConvCudaTest, Conv2DBackpropFilterWritesF32Dw) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (DType t : {DType::f16, DType::bf16}) {
    Rng rng(14);
    ConvAttrs a = conv_attrs(1, 1);
    const Shape xs = {2, 8, 9, 9}, ws = {6, 8, 3, 3};
    a.output_shape = ws;
    const Tensor x = random_tensor_of(t, xs, rng);
    const Tensor dy = random_tensor_of(t, reference::conv2d_output_shape(xs, ws, a), rng);
    EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Conv2DBackpropFilter, a, t, {x, dy},
                                 {{ws, DType::f32}}, conv_tolerance(t)))
        << dtype_name(t);
  }
}

// DCGAN's generator: a transposed convolution 4x4, stride 2, padding 1 from [N, Cin, H, W] to
// [N, Cout, 2H, 2W] (Conv2DBackpropInput with w [Cin, Cout, 4, 4]), and its first layer, 4x4
// from a 1x1 latent to 4x4 (stride 1, no padding).
TEST(ConvCudaTest, TransposedConvolutionMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  struct Case {
    Shape in, w, out;
    ConvAttrs attrs;
  };
  const std::vector<Case> cases = {
      {{3, 16, 5, 5}, {16, 8, 4, 4}, {3, 8, 10, 10}, conv_attrs(2, 1)},
      {{3, 20, 1, 1}, {20, 16, 4, 4}, {3, 16, 4, 4}, conv_attrs(1, 0)},
      {{2, 8, 7, 7}, {8, 3, 4, 4}, {2, 3, 14, 14}, conv_attrs(2, 1)},
  };
  for (const Case& c : cases)
    for (DType t : kDtypes) {
      Rng rng(15);
      ConvAttrs a = c.attrs;
      a.output_shape = c.out;
      const Tensor in = random_tensor_of(t, c.in, rng);
      const Tensor w = random_tensor_of(t, c.w, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Conv2DBackpropInput, a, t, {in, w}, {{c.out, t}},
                                   conv_tolerance(t)))
          << shape_str(c.in) << " -> " << shape_str(c.out);
      // The transposed convolution's weight gradient: Conv2DBackpropFilter with x = its output
      // gradient and dy = its input.
      ConvAttrs f = c.attrs;
      f.output_shape = c.w;
      const Tensor dout = random_tensor_of(t, c.out, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Conv2DBackpropFilter, f, t, {dout, in}, {{c.w, t}},
                                   conv_tolerance(t)))
          << "filter gradient of " << shape_str(c.in) << " -> " << shape_str(c.out);
    }
}

// pad_to (ops/conv_padding.h) at the backend's alignment (8): the padded kernel's valid part
// is the unpadded result up to the order of the sums (cuDNN may choose another algorithm for
// the padded shapes), so it matches the CPU's unpadded kernel within the same tolerance.
// Each kernel runs twice: the second run sees the padded buffers the first left behind (the
// padding must stay zero). First layers of 1 and 3 channels, LeNet's 6 -> 16, an odd number
// of filters, odd channels on both sides; the backprop-filter also with an f32 dw.
TEST(ConvCudaTest, PaddedMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const int pad_to = gpu->padding_alignment();
  const std::vector<ConvCase> cases = {
      {"fashion_mnist_stem_c1_k64", {2, 1, 12, 12}, {64, 1, 3, 3}, conv_attrs(1, 1)},
      {"rgb_stem_c3_k16_7x7_stride2", {2, 3, 17, 17}, {16, 3, 7, 7}, conv_attrs(2, 3)},
      {"lenet_c2_c6_k16", {3, 6, 9, 9}, {16, 6, 5, 5}, conv_attrs(1, 0)},
      {"odd_k10_c32_stride2", {2, 32, 9, 9}, {10, 32, 3, 3}, conv_attrs(2, 1)},
      {"odd_both_1x1_c5_k7", {2, 5, 7, 7}, {7, 5, 1, 1}, conv_attrs(1, 0)},
  };
  auto gpu_ptr = std::shared_ptr<Backend>(gpu.get(), [](Backend*) {});
  for (const ConvCase& c : cases)
    for (OpKind kind : {OpKind::Conv2D, OpKind::Conv2DBackpropInput, OpKind::Conv2DBackpropFilter})
      for (DType t : {DType::f16, DType::bf16})
        for (bool f32_dw : {false, true}) {
          if (f32_dw && kind != OpKind::Conv2DBackpropFilter) continue;
          SCOPED_TRACE(c.name + " " + op_name(kind) + " " + dtype_name(t) +
                       (f32_dw ? " f32 dw" : ""));
          Rng rng(15);
          ConvAttrs a = c.attrs;
          const Shape y = reference::conv2d_output_shape(c.x, c.w, a);
          std::vector<Tensor> in;
          TensorDesc out;
          if (kind == OpKind::Conv2D) {
            in = {random_tensor_of(t, c.x, rng), random_tensor_of(t, c.w, rng)};
            out = {y, t};
          } else if (kind == OpKind::Conv2DBackpropInput) {
            a.output_shape = c.x;
            in = {random_tensor_of(t, y, rng), random_tensor_of(t, c.w, rng)};
            out = {c.x, t};
          } else {
            a.output_shape = c.w;
            in = {random_tensor_of(t, c.x, rng), random_tensor_of(t, y, rng)};
            out = {c.w, f32_dw ? DType::f32 : t};
          }
          ExecContext cpu_ctx;
          const Tensor expected = run_op_eager(kind, a, t, in, {out}, cpu_ctx)[0];

          ExecContext gpu_ctx(gpu_ptr);
          KernelSpec spec{kind, a, t, {{in[0].shape(), t}, {in[1].shape(), t}}, {out}, "padded"};
          spec.pad_to = pad_to;
          ASSERT_TRUE(conv_runs_padded(spec));
          auto kernel = create_kernel(spec, gpu_ctx);
          EXPECT_GT(gpu_ctx.kernel_buffer_bytes(), 0u);  // the padded operands
          const std::vector<Tensor> device_in = {gpu->to_device(in[0]), gpu->to_device(in[1])};
          const std::vector<Tensor> device_out = {gpu->zeros(out.shape, out.dtype)};
          for (int run = 0; run < 2; ++run) {
            kernel->run(gpu_ctx, device_in, device_out);
            gpu->synchronize();
            const testing::Tolerance tol = conv_tolerance(t);
            EXPECT_TRUE(
                testing::all_close(gpu->to_host(device_out[0]), expected, tol.rtol, tol.atol))
                << "run " << run;
          }
        }
}

}  // namespace
}  // namespace campo
