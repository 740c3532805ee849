// Kernels that accept blocked nChw8c and nChw16c data (ops/kernel.h Layout) give the results they
// give on plain NCHW data: the layout conversion against a host permutation written from the
// layout's definition, the convolution family and batch norm (training and inference)
// and bias with their activations blocked against the same kernels on plain data.
#include <gtest/gtest.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/cpu/context.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

// A blocked layout from the definition in ops/kernel.h: with B = channel_block(layout),
// element (n, c, h, w) at (((n * C/B + c/B) * H + h) * W + w) * B + c % B. Works on bytes,
// for any dtype; `to_layout` false permutes back.
Tensor permute(const Tensor& t, Layout layout, bool to_layout) {
  const Shape& s = t.shape();
  const int64_t N = s[0], C = s[1], S = s[2] * s[3], B = channel_block(layout);
  const size_t e = dtype_size(t.dtype());
  Tensor out = Tensor::empty(s, t.dtype());
  const char* src = static_cast<const char*>(t.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        const size_t plain = size_t((n * C + c) * S + i) * e;
        const size_t blocked = size_t(((n * (C / B) + c / B) * S + i) * B + c % B) * e;
        std::memcpy(dst + (to_layout ? blocked : plain), src + (to_layout ? plain : blocked), e);
      }
  return out;
}

constexpr Layout kBlockedLayouts[] = {Layout::nChw8c, Layout::nChw16c};

Tensor cast_to(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(t.shape(), dt);
  convert(t.data(), t.dtype(), out.data(), dt, size_t(t.numel()));
  return out;
}

// Runs one kernel with inputs `blocked_in` and outputs `blocked_out` (indices) in `layout`:
// takes and returns plain host tensors, permuting on the host around the kernel.
std::vector<Tensor> run_with_layouts(Layout layout, OpKind kind, const Attrs& attrs,
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
    spec.inputs[size_t(i)].layout = layout;
    in[size_t(i)] = permute(inputs[size_t(i)], layout, true);
  }
  for (int o : blocked_out) spec.outputs[size_t(o)].layout = layout;
  auto kernel = create_kernel(spec, ctx);
  std::vector<Tensor> out;
  for (const TensorDesc& d : output_descs) out.push_back(Tensor::zeros(d.shape, d.dtype));
  kernel->run(ctx, in, out);
  for (int o : blocked_out) out[size_t(o)] = permute(out[size_t(o)], layout, false);
  return out;
}

TEST(LayoutConversion, MatchesTheLayoutDefinitionForEveryFloatType) {
  for (Layout layout : kBlockedLayouts)
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + " " + dtype_name(dt));
      Rng rng(1);
      const Shape shape{2, 32, 3, 5};
      const Tensor plain = cast_to(random_tensor(shape, rng), dt);
      ExecContext ctx;
      const TensorDesc p{shape, dt, Layout::plain}, b{shape, dt, layout};
      Tensor blocked = Tensor::zeros(shape, dt), back = Tensor::zeros(shape, dt);
      create_layout_conversion(p, b, ctx)->run(ctx, {plain}, {blocked});
      create_layout_conversion(b, p, ctx)->run(ctx, {blocked}, {back});
      const Tensor expected = permute(plain, layout, true);
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

// oneDNN's kernels for blocked data and for nchw (reordered internally to its own choice,
// nChw8c on AVX2, nChw16c on AVX-512) may sum in another order: results agree to f32 rounding of
// sums of a few hundred terms in [-1, 1] (tests/ops/conv_test.cc's tolerance).
constexpr double kConvRtol = 1e-5, kConvAtol = 1e-4;

struct ConvLayoutCase {
  Shape x, w;
  int stride;
};

class ConvBlockedTest : public ::testing::TestWithParam<std::tuple<ConvLayoutCase, Layout>> {};

TEST_P(ConvBlockedTest, ForwardBackpropInputAndFilterMatchPlain) {
  // Not a structured binding: lambdas below capture them (clang 14 refuses that).
  const ConvLayoutCase& c = std::get<0>(GetParam());
  const Layout layout = std::get<1>(GetParam());
  const int64_t B = channel_block(layout);
  Rng rng(2);
  const int k = int(c.w[2]);
  ConvAttrs a = conv_attrs(k, c.stride);
  const int64_t ho = (c.x[2] + 2 * (k / 2) - k) / c.stride + 1;
  const int64_t wo = (c.x[3] + 2 * (k / 2) - k) / c.stride + 1;
  const Shape y_shape{c.x[0], c.w[0], ho, wo};
  const Tensor x = random_tensor(c.x, rng), w = random_tensor(c.w, rng);
  const Tensor dy = random_tensor(y_shape, rng);
  // An activation is blocked where its channels allow (graph/layout.h).
  auto blocked_if = [&](const Shape& shape, int index) {
    return shape[1] % B == 0 ? std::vector<int>{index} : std::vector<int>{};
  };
  auto run = [&](OpKind kind, const Attrs& attrs, const std::vector<Tensor>& in, const Shape& out,
                 std::vector<int> blocked_in, std::vector<int> blocked_out) {
    return run_with_layouts(layout, kind, attrs, in, {{out}}, blocked_in, blocked_out)[0];
  };

  // Forward: x and y blocked.
  const Tensor y_plain = run(OpKind::Conv2D, a, {x, w}, y_shape, {}, {});
  const Tensor y_blocked =
      run(OpKind::Conv2D, a, {x, w}, y_shape, blocked_if(c.x, 0), blocked_if(y_shape, 0));
  EXPECT_TRUE(all_close(y_blocked, y_plain, kConvRtol, kConvAtol));

  // Backprop-input: dy and dx blocked.
  ConvAttrs ad = a;
  ad.output_shape = c.x;
  const Tensor dx_plain = run(OpKind::Conv2DBackpropInput, ad, {dy, w}, c.x, {}, {});
  const Tensor dx_blocked = run(OpKind::Conv2DBackpropInput, ad, {dy, w}, c.x,
                                blocked_if(y_shape, 0), blocked_if(c.x, 0));
  EXPECT_TRUE(all_close(dx_blocked, dx_plain, kConvRtol, kConvAtol));

  // Backprop-filter: x and dy blocked, dw plain. dw sums N * Ho * Wo products.
  ConvAttrs aw = a;
  aw.output_shape = c.w;
  std::vector<int> both = blocked_if(c.x, 0);
  for (int i : blocked_if(y_shape, 1)) both.push_back(i);
  const Tensor dw_plain = run(OpKind::Conv2DBackpropFilter, aw, {x, dy}, c.w, {}, {});
  const Tensor dw_blocked = run(OpKind::Conv2DBackpropFilter, aw, {x, dy}, c.w, both, {});
  EXPECT_TRUE(all_close(dw_blocked, dw_plain, kConvRtol, 4 * kConvAtol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvBlockedTest,
    ::testing::Combine(
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
                          ConvLayoutCase{{4, 128, 16, 16}, {256, 128, 1, 1}, 2}),
        ::testing::ValuesIn(kBlockedLayouts)));

// The layout oneDNN's forward convolution picks for its source when asked for its own
// (format_tag::any), of a stride-1 "same" convolution x * w; plain where it is neither
// blocked layout.
Layout onednn_convolution_source_layout(DType dt, const Shape& x, const Shape& w) {
  using dnnl::memory;
  const auto type = dnnl_type(dt, "test");
  const memory::dims xd(x.begin(), x.end()), wd(w.begin(), w.end());
  const memory::dims yd{x[0], w[0], x[2], x[3]}, pad{w[2] / 2, w[3] / 2};
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const dnnl::convolution_forward::primitive_desc pd(
      engine, dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
      {xd, type, memory::format_tag::any}, {wd, type, memory::format_tag::any},
      {yd, type, memory::format_tag::any}, {1, 1}, {0, 0}, pad, pad);
  for (Layout l : kBlockedLayouts)
    if (pd.src_desc() == memory::desc(xd, type, activation_format(l))) return l;
  return Layout::plain;
}

// The layout the pass blocks CPU activations in is the one oneDNN's convolutions choose for
// them on this machine, so that a chain of convolutions runs without reorders.
void expect_blocked_layout_is_onednns(DType dt) {
  for (const Shape& w : {Shape{64, 64, 3, 3}, Shape{256, 64, 1, 1}})
    EXPECT_EQ(onednn_convolution_source_layout(dt, {32, 64, 16, 16}, w), cpu_blocked_layout())
        << shape_str(w);
}

TEST(CpuBlockedLayoutTest, IsTheLayoutOneDnnF32ConvolutionsPickHere) {
  expect_blocked_layout_is_onednns(DType::f32);
}

TEST(CpuBlockedLayoutTest, IsTheLayoutOneDnnBf16ConvolutionsPickHere) {
  if (!cpu_has_native_bf16()) GTEST_SKIP() << "no AVX-512 BF16: bf16 is emulated in f32";
  // oneDNN's AMX bf16 convolutions (Sapphire Rapids and later) take nhwc, a layout the pass
  // does not have: there bf16 convolutions reorder their blocked operands (correct, not as
  // fast as they could be).
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx)
    GTEST_SKIP() << "AMX bf16 convolutions take nhwc, which the layout pass does not have yet";
  expect_blocked_layout_is_onednns(DType::bf16);
}

// Batch norm on blocked data sums each channel's planes in the same f32-lanes-then-double
// order as on plain data, but with 8 or 16 channels interleaved the SIMD lanes split a plane
// differently: results agree to a few f32 ulp (dx: of |dy| ~ 1), the table's f32
// tolerance, with the backward's looser rtol of tests/ops/batch_norm_test.cc.
TEST(BatchNormBlockedTest, ForwardAndGradMatchPlainInTrainingAndInference) {
  const Shape shape{3, 32, 6, 5};
  Rng rng(4);
  const Tensor x = random_tensor(shape, rng, 2.0f, 5.0f);
  const Tensor scale = random_tensor({32}, rng, 0.5f, 1.5f);
  const Tensor offset = random_tensor({32}, rng, -0.5f, 0.5f);
  const Tensor rmean = random_tensor({32}, rng, -1.0f, 1.0f);
  const Tensor rvar = random_tensor({32}, rng, 0.5f, 2.0f);
  const Tensor dy = random_tensor(shape, rng);
  const std::vector<TensorDesc> outs = {{shape}, {{32}}, {{32}}};
  const Tolerance f32 = tolerance_for(DType::f32);
  for (Layout layout : kBlockedLayouts)
    for (bool training : {true, false}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + (training ? " training" : " inference"));
      BatchNormAttrs attrs{1e-5f, 0.1f, training};
      // Each run gets its own running statistics (training updates them in place).
      auto fwd = [&](std::vector<int> in, std::vector<int> out) {
        Tensor rm = rmean.clone(), rv = rvar.clone();
        auto r = run_with_layouts(layout, OpKind::FusedBatchNorm, attrs, {x, scale, offset, rm, rv},
                                  outs, in, out);
        r.push_back(rm);
        r.push_back(rv);
        return r;
      };
      auto p = fwd({}, {}), b = fwd({0}, {0});
      for (size_t i = 0; i < p.size(); ++i)
        EXPECT_TRUE(all_close(b[i], p[i], f32.rtol, f32.atol)) << "output " << i;
      auto gp = run_with_layouts(layout, OpKind::FusedBatchNormGrad, attrs,
                                 {dy, x, scale, p[1], p[2]}, outs, {}, {});
      auto gb = run_with_layouts(layout, OpKind::FusedBatchNormGrad, attrs,
                                 {dy, x, scale, p[1], p[2]}, outs, {0, 1}, {0});
      EXPECT_TRUE(all_close(gb[0], gp[0], 1e-5, f32.atol));
      EXPECT_TRUE(all_close(gb[1], gp[1], 1e-5, 1e-4));
      EXPECT_TRUE(all_close(gb[2], gp[2], 1e-5, 1e-4));
    }
}

// BiasAdd is exact in either layout; BiasAddGrad sums each plane in f32 lanes laid out
// differently per layout, then the planes in double: f32 rounding of sums of 30 terms in
// [-1, 1] (a few ulp of partial sums ~ 3), the table's f32 atol of 1e-5.
TEST(BiasBlockedTest, BiasAddAndGradMatchPlain) {
  const Shape shape{3, 32, 6, 5};
  Rng rng(6);
  const Tensor x = random_tensor(shape, rng), bias = random_tensor({32}, rng);
  for (Layout layout : kBlockedLayouts) {
    SCOPED_TRACE(layout_name(layout));
    auto p = run_with_layouts(layout, OpKind::BiasAdd, NoAttrs{}, {x, bias}, {{shape}}, {}, {});
    auto b = run_with_layouts(layout, OpKind::BiasAdd, NoAttrs{}, {x, bias}, {{shape}}, {0}, {0});
    EXPECT_TRUE(all_close(b[0], p[0], 0, 0));
    auto gp = run_with_layouts(layout, OpKind::BiasAddGrad, NoAttrs{}, {x}, {{{32}}}, {}, {});
    auto gb = run_with_layouts(layout, OpKind::BiasAddGrad, NoAttrs{}, {x}, {{{32}}}, {0}, {});
    EXPECT_TRUE(all_close(gb[0], gp[0], 1.3e-6, 1e-5));
  }
}

}  // namespace
}  // namespace campo::testing
