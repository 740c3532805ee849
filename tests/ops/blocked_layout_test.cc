// Kernels that accept blocked nChw8c data (ops/kernel.h Layout) give the results they give
// on plain NCHW data: the layout conversion against a host permutation written from the
// layout's definition, the convolution family and batch norm (training and inference)
// and bias with their activations blocked against the same kernels on plain data.
#include <gtest/gtest.h>

#include <cstring>

#include "ops/kernel.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

// nChw8c from the definition in ops/kernel.h: element (n, c, h, w) at
// (((n * C/8 + c/8) * H + h) * W + w) * 8 + c % 8. Works on bytes, for any dtype.
Tensor to_blocked(const Tensor& plain) {
  const Shape& s = plain.shape();
  const int64_t N = s[0], C = s[1], S = s[2] * s[3];
  const size_t e = dtype_size(plain.dtype());
  Tensor out = Tensor::empty(s, plain.dtype());
  const char* src = static_cast<const char*>(plain.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i)
        std::memcpy(dst + size_t(((n * (C / 8) + c / 8) * S + i) * 8 + c % 8) * e,
                    src + size_t((n * C + c) * S + i) * e, e);
  return out;
}

Tensor from_blocked(const Tensor& blocked) {
  const Shape& s = blocked.shape();
  const int64_t N = s[0], C = s[1], S = s[2] * s[3];
  const size_t e = dtype_size(blocked.dtype());
  Tensor out = Tensor::empty(s, blocked.dtype());
  const char* src = static_cast<const char*>(blocked.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i)
        std::memcpy(dst + size_t((n * C + c) * S + i) * e,
                    src + size_t(((n * (C / 8) + c / 8) * S + i) * 8 + c % 8) * e, e);
  return out;
}

Tensor cast_to(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(t.shape(), dt);
  convert(t.data(), t.dtype(), out.data(), dt, size_t(t.numel()));
  return out;
}

// Runs one kernel with inputs `blocked_in` and outputs `blocked_out` (indices) in nChw8c:
// takes and returns plain host tensors, permuting on the host around the kernel.
std::vector<Tensor> run_with_layouts(OpKind kind, const Attrs& attrs,
                                     const std::vector<Tensor>& inputs,
                                     const std::vector<TensorDesc>& output_descs,
                                     const std::vector<int>& blocked_in,
                                     const std::vector<int>& blocked_out) {
  ExecContext ctx;
  KernelSpec spec{kind, attrs, DType::f32, {}, output_descs, op_name(kind)};
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) {
    spec.inputs.push_back({t.shape(), t.dtype()});
    in.push_back(t.clone());
  }
  for (int i : blocked_in) {
    spec.inputs[size_t(i)].layout = Layout::nChw8c;
    in[size_t(i)] = to_blocked(inputs[size_t(i)]);
  }
  for (int o : blocked_out) spec.outputs[size_t(o)].layout = Layout::nChw8c;
  auto kernel = create_kernel(spec, ctx);
  std::vector<Tensor> out;
  for (const TensorDesc& d : output_descs) out.push_back(Tensor::zeros(d.shape, d.dtype));
  kernel->run(ctx, in, out);
  for (int o : blocked_out) out[size_t(o)] = from_blocked(out[size_t(o)]);
  return out;
}

TEST(LayoutConversion, MatchesTheLayoutDefinitionForEveryFloatType) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(1);
    const Shape shape{2, 16, 3, 5};
    const Tensor plain = cast_to(random_tensor(shape, rng), dt);
    ExecContext ctx;
    const TensorDesc p{shape, dt, Layout::plain}, b{shape, dt, Layout::nChw8c};
    Tensor blocked = Tensor::zeros(shape, dt), back = Tensor::zeros(shape, dt);
    create_layout_conversion(p, b, ctx)->run(ctx, {plain}, {blocked});
    create_layout_conversion(b, p, ctx)->run(ctx, {blocked}, {back});
    const Tensor expected = to_blocked(plain);
    EXPECT_EQ(std::memcmp(blocked.data(), expected.data(), plain.nbytes()), 0);
    EXPECT_EQ(std::memcmp(back.data(), plain.data(), plain.nbytes()), 0);
  }
}

// A k x k convolution with "same" padding k / 2.
ConvAttrs conv_attrs(int k, int stride) {
  ConvAttrs a;
  a.stride_h = a.stride_w = stride;
  a.pad_h = a.pad_w = k / 2;
  return a;
}

// oneDNN's kernels for nChw8c and for nchw (reordered internally to its own choice, which
// on AVX2 is nChw8c too) may sum in another order: results agree to f32 rounding of sums
// of a few hundred terms in [-1, 1] (tests/ops/conv_test.cc's tolerance).
constexpr double kConvRtol = 1e-5, kConvAtol = 1e-4;

struct ConvLayoutCase {
  Shape x, w;
  int stride;
};

class ConvBlockedTest : public ::testing::TestWithParam<ConvLayoutCase> {};

TEST_P(ConvBlockedTest, ForwardBackpropInputAndFilterMatchPlain) {
  const auto& c = GetParam();
  Rng rng(2);
  const int k = int(c.w[2]);
  ConvAttrs a = conv_attrs(k, c.stride);
  const int64_t ho = (c.x[2] + 2 * (k / 2) - k) / c.stride + 1;
  const int64_t wo = (c.x[3] + 2 * (k / 2) - k) / c.stride + 1;
  const Shape y_shape{c.x[0], c.w[0], ho, wo};
  const Tensor x = random_tensor(c.x, rng), w = random_tensor(c.w, rng);
  const Tensor dy = random_tensor(y_shape, rng);
  const bool x_blockable = c.x[1] % 8 == 0;
  std::vector<int> x_in = x_blockable ? std::vector<int>{0} : std::vector<int>{};

  // Forward: x blocked (when C % 8 == 0), y blocked.
  auto y_plain = run_with_layouts(OpKind::Conv2D, a, {x, w}, {{y_shape}}, {}, {});
  auto y_blocked = run_with_layouts(OpKind::Conv2D, a, {x, w}, {{y_shape}}, x_in, {0});
  EXPECT_TRUE(all_close(y_blocked[0], y_plain[0], kConvRtol, kConvAtol));

  // Backprop-input: dy blocked, dx blocked (when C % 8 == 0).
  ConvAttrs ad = a;
  ad.output_shape = c.x;
  auto dx_plain = run_with_layouts(OpKind::Conv2DBackpropInput, ad, {dy, w}, {{c.x}}, {}, {});
  auto dx_blocked = run_with_layouts(OpKind::Conv2DBackpropInput, ad, {dy, w}, {{c.x}}, {0},
                                     x_blockable ? std::vector<int>{0} : std::vector<int>{});
  EXPECT_TRUE(all_close(dx_blocked[0], dx_plain[0], kConvRtol, kConvAtol));

  // Backprop-filter: x and dy blocked, dw plain. dw sums N * Ho * Wo products.
  ConvAttrs aw = a;
  aw.output_shape = c.w;
  std::vector<int> both = x_in;
  both.push_back(1);
  auto dw_plain = run_with_layouts(OpKind::Conv2DBackpropFilter, aw, {x, dy}, {{c.w}}, {}, {});
  auto dw_blocked = run_with_layouts(OpKind::Conv2DBackpropFilter, aw, {x, dy}, {{c.w}}, both, {});
  EXPECT_TRUE(all_close(dw_blocked[0], dw_plain[0], kConvRtol, 4 * kConvAtol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvBlockedTest,
    ::testing::Values(ConvLayoutCase{{2, 16, 8, 8}, {16, 16, 3, 3}, 1},
                      ConvLayoutCase{{2, 8, 9, 9}, {24, 8, 3, 3}, 2},
                      // 1x1: the plain path of prefer_blocked_layouts without blocking
                      ConvLayoutCase{{2, 16, 5, 5}, {8, 16, 1, 1}, 1},
                      // the stem: 3 input channels stay plain, the output is blocked
                      ConvLayoutCase{{2, 3, 8, 8}, {16, 3, 3, 3}, 1},
                      // ResNet-18's first downsampling block at 32 px
                      ConvLayoutCase{{4, 64, 32, 32}, {128, 64, 3, 3}, 2},
                      ConvLayoutCase{{4, 64, 32, 32}, {128, 64, 1, 1}, 2},
                      ConvLayoutCase{{4, 128, 16, 16}, {128, 128, 3, 3}, 1},
                      ConvLayoutCase{{4, 128, 16, 16}, {256, 128, 1, 1}, 2}));

// Batch norm on nChw8c sums each channel's planes in the same f32-lanes-then-double order
// as on plain data, but with 8 channels interleaved the SIMD lanes split a plane
// differently: results agree to a few f32 ulp (dx: of |dy| ~ 1), the table's f32
// tolerance, with the backward's looser rtol of tests/ops/batch_norm_test.cc.
TEST(BatchNormBlockedTest, ForwardAndGradMatchPlainInTrainingAndInference) {
  const Shape shape{3, 16, 6, 5};
  Rng rng(4);
  const Tensor x = random_tensor(shape, rng, 2.0f, 5.0f);
  const Tensor scale = random_tensor({16}, rng, 0.5f, 1.5f);
  const Tensor offset = random_tensor({16}, rng, -0.5f, 0.5f);
  const Tensor rmean = random_tensor({16}, rng, -1.0f, 1.0f);
  const Tensor rvar = random_tensor({16}, rng, 0.5f, 2.0f);
  const Tensor dy = random_tensor(shape, rng);
  const std::vector<TensorDesc> outs = {{shape}, {{16}}, {{16}}};
  const Tolerance f32 = tolerance_for(DType::f32);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    BatchNormAttrs attrs{1e-5f, 0.1f, training};
    // Each run gets its own running statistics (training updates them in place).
    auto fwd = [&](std::vector<int> in, std::vector<int> out) {
      Tensor rm = rmean.clone(), rv = rvar.clone();
      auto r = run_with_layouts(OpKind::FusedBatchNorm, attrs, {x, scale, offset, rm, rv}, outs, in,
                                out);
      r.push_back(rm);
      r.push_back(rv);
      return r;
    };
    auto p = fwd({}, {}), b = fwd({0}, {0});
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_TRUE(all_close(b[i], p[i], f32.rtol, f32.atol)) << "output " << i;
    auto gp = run_with_layouts(OpKind::FusedBatchNormGrad, attrs, {dy, x, scale, p[1], p[2]}, outs,
                               {}, {});
    auto gb = run_with_layouts(OpKind::FusedBatchNormGrad, attrs, {dy, x, scale, p[1], p[2]}, outs,
                               {0, 1}, {0});
    EXPECT_TRUE(all_close(gb[0], gp[0], 1e-5, f32.atol));
    EXPECT_TRUE(all_close(gb[1], gp[1], 1e-5, 1e-4));
    EXPECT_TRUE(all_close(gb[2], gp[2], 1e-5, 1e-4));
  }
}

// BiasAdd is exact in either layout; BiasAddGrad sums each plane in f32 lanes laid out
// differently per layout, then the planes in double: f32 rounding of sums of 30 terms in
// [-1, 1] (a few ulp of partial sums ~ 3), the table's f32 atol of 1e-5.
TEST(BiasBlockedTest, BiasAddAndGradMatchPlain) {
  const Shape shape{3, 16, 6, 5};
  Rng rng(6);
  const Tensor x = random_tensor(shape, rng), bias = random_tensor({16}, rng);
  auto p = run_with_layouts(OpKind::BiasAdd, NoAttrs{}, {x, bias}, {{shape}}, {}, {});
  auto b = run_with_layouts(OpKind::BiasAdd, NoAttrs{}, {x, bias}, {{shape}}, {0}, {0});
  EXPECT_TRUE(all_close(b[0], p[0], 0, 0));
  auto gp = run_with_layouts(OpKind::BiasAddGrad, NoAttrs{}, {x}, {{{16}}}, {}, {});
  auto gb = run_with_layouts(OpKind::BiasAddGrad, NoAttrs{}, {x}, {{{16}}}, {0}, {});
  EXPECT_TRUE(all_close(gb[0], gp[0], 1.3e-6, 1e-5));
}

}  // namespace
}  // namespace campo::testing
