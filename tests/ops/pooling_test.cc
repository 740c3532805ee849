// MaxPool / AvgPool and their gradients: kernels against the naive reference on ResNet's
// stem window, 2x2/2, non-square inputs and windows, global pooling and batch 1; gradients
// against finite differences; shape errors.
#include "tests/reference/pooling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "graph/builder.h"
#include "graph/executor.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

struct PoolCase {
  const char* name;
  Shape x;
  PoolAttrs attrs;
};

PoolAttrs window(int kh, int kw, int sh, int sw, int ph, int pw) {
  return PoolAttrs{kh, kw, sh, sw, ph, pw, {}};
}
PoolAttrs square(int k, int s, int p) { return window(k, k, s, s, p, p); }

std::ostream& operator<<(std::ostream& os, const PoolCase& c) { return os << c.name; }

const PoolCase kCases[] = {
    {"resnet_stem_odd", {2, 3, 13, 13}, square(3, 2, 1)},
    {"resnet_stem_even", {1, 4, 16, 16}, square(3, 2, 1)},
    {"k2s2", {2, 3, 8, 8}, square(2, 2, 0)},
    {"k2s2_odd_drops_last", {2, 2, 7, 9}, square(2, 2, 0)},
    {"non_square_input", {3, 2, 7, 11}, square(3, 2, 1)},
    {"non_square_window", {2, 3, 9, 8}, window(3, 2, 2, 1, 1, 0)},
    {"overlapping_stride1", {1, 2, 6, 5}, square(3, 1, 1)},
    {"global_7x7", {2, 5, 7, 7}, square(7, 1, 0)},
    {"global_non_square", {1, 3, 4, 6}, window(4, 6, 1, 1, 0, 0)},
    {"batch1_single_channel", {1, 1, 5, 5}, square(2, 1, 0)},
    // Rows wider than one block of output columns (16 in the AVX-512 MaxPool, 4 in the SSE
    // one): stride 1, 2 and a generic stride, and a row of many blocks.
    {"wide_stem", {2, 3, 20, 37}, square(3, 2, 1)},
    {"wide_k2s2", {1, 2, 9, 40}, square(2, 2, 0)},
    {"wide_stride3", {1, 2, 7, 50}, square(3, 3, 1)},
    {"wide_stride1_two_chunks", {1, 2, 5, 300}, window(3, 2, 1, 1, 1, 1)},
};

// Distinct values spaced 0.05 apart in random order: no ties, and a finite-difference step
// of 1e-2 never changes which element wins a window.
Tensor tie_free_tensor(const Shape& shape, uint64_t seed) {
  const int64_t n = shape_numel(shape);
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[size_t(i)], order[rng.below(uint64_t(i + 1))]);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 0.05f * float(order[size_t(i)] - n / 2);
  return Tensor::from_vector(v, shape);
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

class Pooling : public ::testing::TestWithParam<PoolCase> {};

TEST_P(Pooling, MaxPoolMatchesReference) {
  const PoolCase& c = GetParam();
  Rng rng(1);
  const Tensor x = random_tensor(c.x, rng);
  auto out = run_op(OpKind::MaxPool, c.attrs, {x});
  auto ref = reference::max_pool_forward(x, c.attrs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].dtype(), DType::i32);
  EXPECT_TRUE(all_close(out[0], ref.y, 0, 0));  // a max is exact
  EXPECT_TRUE(all_close(out[1], ref.argmax, 0, 0));
}

TEST_P(Pooling, MaxPoolGradMatchesReference) {
  const PoolCase& c = GetParam();
  Rng rng(2);
  const Tensor x = random_tensor(c.x, rng);
  auto fwd = run_op(OpKind::MaxPool, c.attrs, {x});
  const Tensor dy = random_tensor(fwd[0].shape(), rng);
  PoolAttrs ga = c.attrs;
  ga.input_shape = c.x;
  auto dx = run_op(OpKind::MaxPoolGrad, ga, {dy, fwd[1]});
  // Overlapping windows add in a different order than the reference's double sum.
  EXPECT_TRUE(
      all_close(dx[0], reference::max_pool_backward(dy, fwd[1], c.x), kF32.rtol, kF32.atol));
}

TEST_P(Pooling, AvgPoolMatchesReference) {
  const PoolCase& c = GetParam();
  Rng rng(3);
  const Tensor x = random_tensor(c.x, rng);
  auto out = run_op(OpKind::AvgPool, c.attrs, {x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(all_close(out[0], reference::avg_pool_forward(x, c.attrs), kF32.rtol, kF32.atol));
}

TEST_P(Pooling, AvgPoolGradMatchesReference) {
  const PoolCase& c = GetParam();
  Rng rng(4);
  PoolAttrs ga = c.attrs;
  ga.input_shape = c.x;
  const Tensor dy = random_tensor(reference::pooled(c.attrs, c.x), rng);
  auto dx = run_op(OpKind::AvgPoolGrad, ga, {dy});
  EXPECT_TRUE(
      all_close(dx[0], reference::avg_pool_backward(dy, c.attrs, c.x), kF32.rtol, kF32.atol));
}

INSTANTIATE_TEST_SUITE_P(Windows, Pooling, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PoolingForward, MaxPoolPaddingNeverWins) {
  // All-negative input: a zero from padding would win if padding took part.
  Rng rng(5);
  const Tensor x = random_tensor({1, 2, 5, 5}, rng, -3.0f, -1.0f);
  auto out = run_op(OpKind::MaxPool, square(3, 2, 1), {x});
  for (float v : out[0].to_float_vector()) EXPECT_LT(v, -0.5f);
}

// torchvision's AlexNet / Inception-v3 nn.MaxPool2d(kernel_size=3, stride=2): floor mode,
// no padding, so H -> floor((H - 3) / 2) + 1 (7 -> 3, 35 -> 17, 147 -> 73, 55 -> 27).
TEST(PoolingForward, MaxPool3Stride2FloorSizeThroughBuilder) {
  for (int64_t h : {7, 8, 35, 55, 147}) {
    Graph g;
    VariableStore vars(0, default_cpu_backend());
    Builder b(g, vars);
    const ValueId y = b.max_pool(b.placeholder("x", {2, 3, h, h + 2}), 3, 2);
    EXPECT_EQ(b.shape(y), (Shape{2, 3, (h - 3) / 2 + 1, (h + 2 - 3) / 2 + 1})) << "H " << h;
  }
}

// By hand on 7x7: windows start at rows / columns 0, 2, 4. Plane 0 increases along rows
// and columns (x = 7 r + c), so each window's max is its bottom-right element
// (2 i + 2, 2 j + 2); plane 1 is its negation, whose max is the top-left (2 i, 2 j).
TEST(PoolingForward, MaxPool3Stride2ByHandOnOddSize) {
  std::vector<float> v(2 * 49);
  for (int k = 0; k < 49; ++k) v[size_t(k)] = float(k), v[size_t(49 + k)] = -float(k);
  const auto out = run_op(OpKind::MaxPool, square(3, 2, 0), {Tensor::from_vector(v, {1, 2, 7, 7})});
  ASSERT_EQ(out[0].shape(), (Shape{1, 2, 3, 3}));
  const std::vector<float> y = out[0].to_float_vector();
  const int32_t* argmax = out[1].data_as<int32_t>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const int bottom_right = (2 * i + 2) * 7 + 2 * j + 2, top_left = 2 * i * 7 + 2 * j;
      EXPECT_EQ(y[size_t(i * 3 + j)], float(bottom_right)) << i << "," << j;
      EXPECT_EQ(argmax[i * 3 + j], bottom_right) << i << "," << j;
      EXPECT_EQ(y[size_t(9 + i * 3 + j)], -float(top_left)) << i << "," << j;
      EXPECT_EQ(argmax[9 + i * 3 + j], top_left) << i << "," << j;
    }
  // 35x35 -> 17x17 (Inception's Mixed_6a pool) against the reference; the last column and
  // row (34) are read by the last window (32, 33, 34).
  const Tensor x35 = tie_free_tensor({1, 3, 35, 35}, 17);
  const auto out35 = run_op(OpKind::MaxPool, square(3, 2, 0), {x35});
  ASSERT_EQ(out35[0].shape(), (Shape{1, 3, 17, 17}));
  const auto ref = reference::max_pool_forward(x35, square(3, 2, 0));
  EXPECT_TRUE(all_close(out35[0], ref.y, 0, 0));
  EXPECT_TRUE(all_close(out35[1], ref.argmax, 0, 0));
}

TEST(PoolingForward, MaxPoolPropagatesNaN) {
  // One NaN in a narrow plane (one block of output columns) and one in a wide plane.
  for (const Shape& xs : {Shape{1, 1, 4, 4}, Shape{1, 1, 4, 40}}) {
    Rng rng(11);
    Tensor x = random_tensor(xs, rng);
    x.data_as<float>()[xs[3] + 2] = std::numeric_limits<float>::quiet_NaN();  // (1, 2)
    auto out = run_op(OpKind::MaxPool, square(2, 2, 0), {x});
    const std::vector<float> y = out[0].to_float_vector();
    EXPECT_TRUE(std::isnan(y[1])) << shape_str(xs);  // window rows 0-1, columns 2-3
    EXPECT_EQ(out[1].data_as<int32_t>()[1], xs[3] + 2) << shape_str(xs);
    EXPECT_EQ(std::count_if(y.begin(), y.end(), [](float v) { return std::isnan(v); }), 1);
  }
}

// `t` (f32, values exact in bf16) as a bf16 tensor.
Tensor to_bf16(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::bf16);
  convert(t.data(), DType::f32, out.data(), DType::bf16, size_t(t.numel()));
  return out;
}

// The bf16 MaxPool (AVX-512 lanes where the CPU has them, 16 or 4 columns per block) gives
// the f32 kernel's maxima and argmax on the same values, with ties, -0, +-inf and NaN (a NaN
// wins; the last one when several), narrow and wide rows, with and without padding.
TEST(PoolingForward, MaxPoolBf16MatchesF32WithNaNAndTies) {
  for (const PoolCase& c : kCases) {
    Rng rng(12);
    Tensor x = random_tensor(c.x, rng);
    float* xv = x.data_as<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const uint64_t r = rng.below(100);
      if (r < 40)
        xv[i] = std::round(xv[i] * 4) / 4;  // ties, and -0
      else if (r < 43)
        xv[i] = std::numeric_limits<float>::quiet_NaN();
      else if (r < 46)
        xv[i] = -std::numeric_limits<float>::infinity();
    }
    x = to_bf16(x);
    std::vector<float> exact(size_t(x.numel()));
    convert(x.data(), DType::bf16, exact.data(), DType::f32, exact.size());
    const auto want = run_op(OpKind::MaxPool, c.attrs, {Tensor::from_vector(exact, c.x)});
    const auto got = run_op(OpKind::MaxPool, c.attrs, {x}, DType::bf16);
    const std::vector<float> y = got[0].to_float_vector(), y_ref = want[0].to_float_vector();
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_TRUE(std::isnan(y[i])
                      ? std::isnan(y_ref[i])
                      : std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(y_ref[i]))
          << c.name << " " << i;
    EXPECT_TRUE(all_close(got[1], want[1], 0, 0)) << c.name;
  }
}

// Global average pooling of bf16 sums 16 planes at a time where the CPU has AVX-512, in the
// order of the one-plane reduction (which the last planes < 16 take): the same bits, for
// planes of 1 to 70 elements (below, at and past one 16-lane chunk, with tails).
TEST(PoolingForward, GlobalAvgPoolBf16BlocksMatchOnePlane) {
  Rng rng(13);
  for (int n = 1; n <= 70; ++n) {
    const int planes = 45;
    Tensor x = random_tensor({1, planes, 1, n}, rng);
    float* xv = x.data_as<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const uint64_t r = rng.below(100);
      if (r < 5)
        xv[i] = -0.0f;
      else if (r < 30)
        xv[i] *= 1e6f;  // sums that round differently in another order
    }
    x = to_bf16(x);
    const PoolAttrs a = window(1, n, 1, 1, 0, 0);
    const Tensor all = run_op(OpKind::AvgPool, a, {x}, DType::bf16)[0];
    for (int p = 0; p < planes; ++p) {
      Tensor one = Tensor::empty({1, 1, 1, n}, DType::bf16);
      std::memcpy(one.data(), static_cast<const uint16_t*>(x.data()) + p * n,
                  size_t(n) * sizeof(uint16_t));
      const Tensor y = run_op(OpKind::AvgPool, a, {one}, DType::bf16)[0];
      EXPECT_EQ(static_cast<const uint16_t*>(y.data())[0],
                static_cast<const uint16_t*>(all.data())[p])
          << "n " << n << " plane " << p;
    }
  }
}

TEST(PoolingForward, AvgPoolExcludesPaddingFromDivisor) {
  // Constant input: every window's average is the constant, corners included.
  Tensor x = Tensor::from_vector(std::vector<float>(2 * 6 * 6, 3.0f), {1, 2, 6, 6});
  auto out = run_op(OpKind::AvgPool, square(3, 2, 1), {x});
  for (float v : out[0].to_float_vector()) EXPECT_FLOAT_EQ(v, 3.0f);
}

PoolAttrs include_pad(PoolAttrs a) {
  a.count_include_pad = true;
  return a;
}

// 3x3 window, stride 1, padding 1 (Inception-v3's branch_pool) on x = 1..9 (3x3), by hand:
// corner (0, 0) sums 1 + 2 + 4 + 5 = 12 over 4 inside elements, edge (0, 1) sums
// 1 + ... + 6 = 21 over 6, the centre 45 over 9. count_include_pad divides every sum by 9
// (PyTorch's F.avg_pool2d default); without it, by the inside count.
TEST(PoolingForward, AvgPoolBordersByHandForBothDivisors) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const std::vector<float> sums = {12, 21, 16, 27, 45, 33, 24, 39, 28};
  const std::vector<float> inside = {4, 6, 4, 6, 9, 6, 4, 6, 4};
  const std::vector<float> y_excl =
      run_op(OpKind::AvgPool, square(3, 1, 1), {x})[0].to_float_vector();
  const std::vector<float> y_incl =
      run_op(OpKind::AvgPool, include_pad(square(3, 1, 1)), {x})[0].to_float_vector();
  ASSERT_EQ(y_incl.size(), 9u);
  for (size_t k = 0; k < 9; ++k) {
    EXPECT_FLOAT_EQ(y_excl[k], sums[k] / inside[k]) << k;
    EXPECT_FLOAT_EQ(y_incl[k], sums[k] / 9.0f) << k;
  }
  // The gradient of sum(y): each input collects 1 / divisor from every window holding it;
  // with count_include_pad x[0, 0] is in 4 windows, so 4 / 9, x[0, 1] in 6, the centre in 9.
  PoolAttrs ga = include_pad(square(3, 1, 1));
  ga.input_shape = {1, 1, 3, 3};
  const Tensor ones = Tensor::from_vector(std::vector<float>(9, 1.0f), {1, 1, 3, 3});
  const std::vector<float> dx = run_op(OpKind::AvgPoolGrad, ga, {ones})[0].to_float_vector();
  for (size_t k = 0; k < 9; ++k) EXPECT_FLOAT_EQ(dx[k], inside[k] / 9.0f) << k;
  // Excluded padding: x[0, 0]'s windows have 4, 6, 6, 9 inside elements.
  ga.count_include_pad = false;
  const std::vector<float> dx_excl = run_op(OpKind::AvgPoolGrad, ga, {ones})[0].to_float_vector();
  EXPECT_FLOAT_EQ(dx_excl[0], 1.0f / 4 + 2.0f / 6 + 1.0f / 9);
}

// Stride 2 with padding: the last window of a 4-wide row (start 2 * 1 - 1 = 1) is inside,
// the first one has a padded row and column; a constant input shows the divisor directly.
TEST(PoolingForward, AvgPoolCountIncludePadOnConstantInput) {
  const Tensor x = Tensor::from_vector(std::vector<float>(16, 9.0f), {1, 1, 4, 4});
  const std::vector<float> y =
      run_op(OpKind::AvgPool, include_pad(square(3, 2, 1)), {x})[0].to_float_vector();
  // Windows rows/cols [-1, 2) and [1, 4): 4, 6, 6 and 9 inside elements, of 9.
  ASSERT_EQ(y.size(), 4u);
  EXPECT_FLOAT_EQ(y[0], 4.0f);
  EXPECT_FLOAT_EQ(y[1], 6.0f);
  EXPECT_FLOAT_EQ(y[2], 6.0f);
  EXPECT_FLOAT_EQ(y[3], 9.0f);
}

// count_include_pad against the reference on windows with padding, including rows wide
// enough for the vectorised inner columns (whose divisor the flag also changes).
const PoolCase kIncludePadCases[] = {
    {"inception_branch_pool", {2, 3, 9, 9}, include_pad(square(3, 1, 1))},
    {"inception_wide", {1, 2, 5, 35}, include_pad(square(3, 1, 1))},
    {"stem_stride2", {2, 3, 13, 13}, include_pad(square(3, 2, 1))},
    {"non_square_window", {2, 3, 9, 8}, include_pad(window(3, 2, 2, 1, 1, 0))},
    {"wide_two_chunks", {1, 2, 5, 300}, include_pad(window(3, 2, 1, 1, 1, 1))},
    {"no_padding", {1, 2, 7, 9}, include_pad(square(2, 2, 0))},
};

class AvgPoolIncludePad : public ::testing::TestWithParam<PoolCase> {};

TEST_P(AvgPoolIncludePad, ForwardAndGradMatchReference) {
  const PoolCase& c = GetParam();
  Rng rng(14);
  const Tensor x = random_tensor(c.x, rng);
  const Tensor y = run_op(OpKind::AvgPool, c.attrs, {x})[0];
  EXPECT_TRUE(all_close(y, reference::avg_pool_forward(x, c.attrs), kF32.rtol, kF32.atol));
  PoolAttrs ga = c.attrs;
  ga.input_shape = c.x;
  const Tensor dy = random_tensor(y.shape(), rng);
  const Tensor dx = run_op(OpKind::AvgPoolGrad, ga, {dy})[0];
  EXPECT_TRUE(all_close(dx, reference::avg_pool_backward(dy, c.attrs, c.x), kF32.rtol, kF32.atol));
}

INSTANTIATE_TEST_SUITE_P(Windows, AvgPoolIncludePad, ::testing::ValuesIn(kIncludePadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// bf16 AvgPool / AvgPoolGrad with count_include_pad against f32 on the same (bf16-exact)
// values: f32 math inside, one rounding of each output, so within the bf16 table.
TEST(PoolingForward, AvgPoolCountIncludePadBf16MatchesF32) {
  const Tolerance bf16 = tolerance_for(DType::bf16);
  for (const PoolCase& c : kIncludePadCases) {
    Rng rng(15);
    const Tensor x = to_bf16(random_tensor(c.x, rng));
    const Tensor x32 = Tensor::from_vector(x.to_float_vector(), c.x);
    const Tensor y = run_op(OpKind::AvgPool, c.attrs, {x}, DType::bf16)[0];
    const Tensor y32 = run_op(OpKind::AvgPool, c.attrs, {x32})[0];
    EXPECT_TRUE(
        all_close(Tensor::from_vector(y.to_float_vector(), y.shape()), y32, bf16.rtol, bf16.atol))
        << c.name;
    PoolAttrs ga = c.attrs;
    ga.input_shape = c.x;
    const Tensor dy = to_bf16(random_tensor(y.shape(), rng));
    const Tensor dy32 = Tensor::from_vector(dy.to_float_vector(), dy.shape());
    const Tensor dx = run_op(OpKind::AvgPoolGrad, ga, {dy}, DType::bf16)[0];
    const Tensor dx32 = run_op(OpKind::AvgPoolGrad, ga, {dy32})[0];
    EXPECT_TRUE(all_close(Tensor::from_vector(dx.to_float_vector(), dx.shape()), dx32, bf16.rtol,
                          bf16.atol))
        << c.name;
  }
}

TEST(PoolingForward, AvgPoolCountIncludePadThroughBuilder) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3, 9, 9});
  ValueId y = b.avg_pool(x, 3, 1, 1, true);
  ValueId z = b.avg_pool(x, 3, 1, 1);
  EXPECT_TRUE(attrs_as<PoolAttrs>(g.node(g.value(y).producer).attrs).count_include_pad);
  EXPECT_FALSE(attrs_as<PoolAttrs>(g.node(g.value(z).producer).attrs).count_include_pad);
  EXPECT_EQ(b.shape(y), (Shape{2, 3, 9, 9}));
  // The graph dump names the flag where it is set, and only there.
  const std::string text = g.to_text();
  EXPECT_NE(text.find("kernel=3x3 stride=1x1 pad=1x1 count_include_pad"), std::string::npos)
      << text;
  size_t count = 0;
  for (size_t at = text.find("count_include_pad"); at != std::string::npos;
       at = text.find("count_include_pad", at + 1))
    ++count;
  EXPECT_EQ(count, 1u) << text;
}

TEST(PoolingForward, GlobalAvgPoolThroughBuilder) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const Shape xs{3, 8, 7, 7};
  ValueId x = b.placeholder("x", xs);
  ValueId y = b.global_avg_pool(x);
  EXPECT_EQ(g.node(g.value(y).producer).kind, OpKind::AvgPool);
  EXPECT_EQ(b.shape(y), (Shape{3, 8, 1, 1}));
  CompileOptions co;
  co.fetches = {y};
  Executable exe(g, vars, co);
  Rng rng(6);
  const Tensor xin = random_tensor(xs, rng);
  exe.input("x").copy_from(xin);
  exe.run();
  EXPECT_TRUE(all_close(exe.output(y), reference::avg_pool_forward(xin, square(7, 1, 0)), kF32.rtol,
                        kF32.atol));
}

TEST(PoolingGradients, MaxPoolWithoutTies) {
  for (const PoolAttrs& a : {square(3, 2, 1), square(2, 2, 0), square(3, 1, 1)}) {
    SCOPED_TRACE(::testing::Message()
                 << "kernel " << a.kernel_h << " stride " << a.stride_h << " pad " << a.pad_h);
    EXPECT_TRUE(check_gradients(OpKind::MaxPool, a, {tie_free_tensor({2, 2, 5, 6}, 7)}));
  }
}

TEST(PoolingGradients, AvgPoolWithPadding) {
  Rng rng(8);
  EXPECT_TRUE(
      check_gradients(OpKind::AvgPool, square(3, 2, 1), {random_tensor({2, 2, 5, 6}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::AvgPool, window(3, 2, 1, 2, 1, 1),
                              {random_tensor({1, 2, 4, 5}, rng)}));
}

TEST(PoolingGradients, AvgPoolCountIncludePad) {
  Rng rng(16);
  EXPECT_TRUE(check_gradients(OpKind::AvgPool, include_pad(square(3, 1, 1)),
                              {random_tensor({2, 2, 5, 6}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::AvgPool, include_pad(square(3, 2, 1)),
                              {random_tensor({1, 2, 7, 7}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::AvgPool, include_pad(window(3, 2, 1, 2, 1, 1)),
                              {random_tensor({1, 2, 4, 5}, rng)}));
}

TEST(PoolingGradients, GlobalAvgPool) {
  Rng rng(9);
  EXPECT_TRUE(check_gradients(OpKind::AvgPool, window(3, 5, 1, 1, 0, 0),
                              {random_tensor({2, 3, 3, 5}, rng)}));
}

TEST(PoolingSchema, AmpLists) {
  EXPECT_EQ(op_schema(OpKind::MaxPool).amp_list, AmpList::clear);
  EXPECT_EQ(op_schema(OpKind::MaxPoolGrad).amp_list, AmpList::clear);
  EXPECT_EQ(op_schema(OpKind::AvgPool).amp_list, AmpList::infer);
  EXPECT_EQ(op_schema(OpKind::AvgPoolGrad).amp_list, AmpList::infer);
}

TEST(PoolingSchema, BadShapesThrowNamingTheOp) {
  Rng rng(10);
  const Tensor small = random_tensor({1, 2, 2, 2}, rng);
  // Window 5 > padded input 2 + 2 * 1 = 4 (the padding itself is legal: 1 <= 5 / 2).
  for (OpKind k : {OpKind::MaxPool, OpKind::AvgPool}) {
    std::string msg = error_of([&] { run_op(k, square(5, 1, 1), {small}); });
    EXPECT_NE(msg.find(op_name(k)), std::string::npos) << msg;
    EXPECT_NE(msg.find("larger than the padded input"), std::string::npos) << msg;
  }
  std::string msg = error_of([&] { run_op(OpKind::MaxPool, square(3, 1, 2), {small}); });
  EXPECT_NE(msg.find("half the kernel"), std::string::npos) << msg;
  msg = error_of([&] { run_op(OpKind::AvgPool, square(2, 0, 0), {small}); });
  EXPECT_NE(msg.find("stride must be positive"), std::string::npos) << msg;
  // count_include_pad is an AvgPool flag: refused on MaxPool, not ignored.
  msg = error_of([&] { run_op(OpKind::MaxPool, include_pad(square(3, 2, 1)), {small}); });
  EXPECT_NE(msg.find("count_include_pad applies to AvgPool only"), std::string::npos) << msg;
  msg = error_of([&] {
    run_op(OpKind::AvgPool, square(2, 2, 0), {random_tensor({2, 4, 4}, rng)});
  });
  EXPECT_NE(msg.find("[N, C, H, W]"), std::string::npos) << msg;

  // Gradients: dy must be the pooled shape of input_shape.
  PoolAttrs ga = square(2, 2, 0);
  ga.input_shape = {1, 2, 6, 6};
  msg = error_of([&] { run_op(OpKind::AvgPoolGrad, ga, {random_tensor({1, 2, 2, 2}, rng)}); });
  EXPECT_NE(msg.find("AvgPoolGrad"), std::string::npos) << msg;
  const Tensor argmax = Tensor::from_vector(std::vector<int32_t>(8, 0), {1, 2, 2, 2});
  msg = error_of([&] {
    run_op(OpKind::MaxPoolGrad, ga, {random_tensor({1, 2, 2, 2}, rng), argmax});
  });
  EXPECT_NE(msg.find("MaxPoolGrad"), std::string::npos) << msg;
}

}  // namespace
}  // namespace campo::testing
