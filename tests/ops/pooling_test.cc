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

TEST(PoolingForward, GlobalAvgPoolThroughBuilder) {
  Graph g;
  VariableStore vars;
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
