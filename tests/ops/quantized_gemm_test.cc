// The CPU's quantized GEMM kernel (ops/cpu/quantized_gemm.cc) against references built from
// runtime/minifloat's encode / decode:
//  - exactly: the f32 kernel of the same op on decode(encode(x * s)) times 1/s_a * 1/s_b (the
//    same oneDNN primitive on the same operands: bit for bit), for MatMul in all four
//    transpose cases and for the convolutions;
//  - to accumulation order: a double-precision sum of the decoded products. The products of two
//    codes are exact in f32, so only the f32 sums round: |y - ref| <= K 2^-24 sum_k |a_k b_k|
//    |f| (the textbook bound gamma_K for any summation order), plus one rounding of |ref| for
//    the final multiplication by f;
//  - bit for bit with integer-valued codes and unit scaling, where every partial sum is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/kernel.h"
#include "runtime/gemm_quant.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::random_tensor;

GemmQuant recipe(Scaling scaling, ElementFormat a, ElementFormat b) {
  GemmQuant q;
  q.enabled = true;
  q.blocks = scaling == Scaling::mx;
  q.format = "test";
  q.element = {a, b};
  q.recipe.scaling = scaling;
  return q;
}

struct QuantizedRun {
  Tensor y;
  std::vector<Tensor> state;
};

QuantizedRun run_quantized(OpKind kind, const Attrs& attrs, const GemmQuant& q, const Tensor& a,
                           const Tensor& b, const Shape& out, ExecContext& ctx,
                           std::vector<Tensor> state = {}) {
  KernelSpec spec{kind,
                  attrs,
                  DType::f32,
                  {{a.shape(), DType::f32}, {b.shape(), DType::f32}},
                  {{out, DType::f32}},
                  "test.gemm",
                  0,
                  q,
                  {}};
  if (state.empty())
    for (int i = 0; i < 2; ++i)
      state.push_back(Tensor::zeros({gemm_quant_state_size(q.recipe)}, DType::f32));
  spec.quant_state = state;
  auto kernel = create_kernel(spec, ctx);
  QuantizedRun r{Tensor::zeros(out, DType::f32), state};
  run_kernel(*kernel, ctx, {a, b}, {r.y});
  return r;
}

// decode(encode(x * scale)) by the scalar functions.
Tensor decoded(const Tensor& x, ElementFormat f, float scale) {
  Tensor d = Tensor::zeros(x.shape(), DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i)
    d.data_as<float>()[i] =
        decode(f, encode_nearest_even(f, x.data_as<float>()[i] * scale, Saturation::saturating));
  return d;
}

float max_abs(const Tensor& x) {
  float amax = 0;
  for (int64_t i = 0; i < x.numel(); ++i) amax = std::max(amax, std::fabs(x.data_as<float>()[i]));
  return amax;
}

float current_scale(const Tensor& x, ElementFormat f) {
  return element_format_info(f).max_finite / max_abs(x);
}

TEST(QuantizedGemmTest, MatMulEqualsTheF32KernelOnDecodedCodesAndADoubleReference) {
  ExecContext ctx;
  Rng rng(3);
  const int64_t M = 9, K = 70, N = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "transpose_a " << ta << " transpose_b " << tb);
      const Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, rng, -3.0f, 3.0f);
      const Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, rng, -0.01f, 0.01f);
      const GemmQuant q = recipe(Scaling::current, ElementFormat::e4m3, ElementFormat::e5m2);
      const MatMulAttrs attrs{ta, tb};
      const QuantizedRun r = run_quantized(OpKind::MatMul, attrs, q, a, b, {M, N}, ctx);
      const float sa = current_scale(a, ElementFormat::e4m3);
      const float sb = current_scale(b, ElementFormat::e5m2);
      EXPECT_EQ(r.state[0].data_as<float>()[0], sa);
      EXPECT_EQ(r.state[1].data_as<float>()[0], sb);
      const Tensor da = decoded(a, ElementFormat::e4m3, sa),
                   db = decoded(b, ElementFormat::e5m2, sb);
      const float factor = (1.0f / sa) * (1.0f / sb);
      const Tensor plain =
          run_op_eager(OpKind::MatMul, attrs, DType::f32, {da, db}, {{{M, N}, DType::f32}}, ctx)[0];
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const float y = r.y.data_as<float>()[m * N + n];
          ASSERT_EQ(y, plain.data_as<float>()[m * N + n] * factor) << m << "," << n;
          double ref = 0, magnitude = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = double(da.data_as<float>()[ta ? k * M + m : m * K + k]) *
                             double(db.data_as<float>()[tb ? n * K + k : k * N + n]);
            ref += p;
            magnitude += std::fabs(p);
          }
          ref *= double(factor);
          const double bound =
              double(K) * 0x1p-24 * magnitude * double(factor) + std::fabs(ref) * 0x1p-23;
          EXPECT_LE(std::fabs(double(y) - ref), bound) << m << "," << n;
        }
    }
}

// Integer codes (|v| <= 8, exact in e4m3) with unit scaling: every partial sum is an integer
// below 2^24, exact in any order, so the kernel equals the reference bit for bit.
TEST(QuantizedGemmTest, IntegerCodesGiveTheExactProduct) {
  ExecContext ctx;
  const int64_t M = 4, K = 64, N = 3;
  Tensor a = Tensor::zeros({M, K}, DType::f32), b = Tensor::zeros({K, N}, DType::f32);
  for (int64_t i = 0; i < M * K; ++i) a.data_as<float>()[i] = float(int(i * 7 % 17) - 8);
  for (int64_t i = 0; i < K * N; ++i) b.data_as<float>()[i] = float(int(i * 5 % 13) - 6);
  const QuantizedRun r = run_quantized(
      OpKind::MatMul, MatMulAttrs{},
      recipe(Scaling::none, ElementFormat::e4m3, ElementFormat::e4m3), a, b, {M, N}, ctx);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t ref = 0;
      for (int64_t k = 0; k < K; ++k)
        ref += int64_t(a.data_as<float>()[m * K + k]) * int64_t(b.data_as<float>()[k * N + n]);
      EXPECT_EQ(r.y.data_as<float>()[m * N + n], float(ref));
    }
}

// The convolutions quantize both operands the same way (delayed scaling: the first step at
// scale 1) and then run the f32 kernel.
TEST(QuantizedGemmTest, ConvolutionsEqualTheF32KernelOnDecodedCodes) {
  ExecContext ctx;
  Rng rng(5);
  ConvAttrs conv{.stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  const Shape x_shape{2, 3, 6, 6}, w_shape{4, 3, 3, 3}, y_shape{2, 4, 6, 6};
  const Tensor x = random_tensor(x_shape, rng, -2.0f, 2.0f), w = random_tensor(w_shape, rng);
  const Tensor dy = random_tensor(y_shape, rng, -0.5f, 0.5f);
  struct Case {
    OpKind kind;
    Tensor a, b;
    Shape out;
  };
  ConvAttrs input = conv, filter = conv;
  input.output_shape = x_shape;
  filter.output_shape = w_shape;
  const Case cases[] = {{OpKind::Conv2D, x, w, y_shape},
                        {OpKind::Conv2DBackpropInput, dy, w, x_shape},
                        {OpKind::Conv2DBackpropFilter, x, dy, w_shape}};
  for (const Case& c : cases) {
    SCOPED_TRACE(op_name(c.kind));
    const Attrs attrs = c.kind == OpKind::Conv2D                ? conv
                        : c.kind == OpKind::Conv2DBackpropInput ? input
                                                                : filter;
    const GemmQuant q = recipe(Scaling::delayed, ElementFormat::e4m3, ElementFormat::e5m2);
    const QuantizedRun r = run_quantized(c.kind, attrs, q, c.a, c.b, c.out, ctx);
    const Tensor plain = run_op_eager(
        c.kind, attrs, DType::f32,
        {decoded(c.a, ElementFormat::e4m3, 1.0f), decoded(c.b, ElementFormat::e5m2, 1.0f)},
        {{c.out, DType::f32}}, ctx)[0];
    for (int64_t i = 0; i < plain.numel(); ++i)
      ASSERT_EQ(r.y.data_as<float>()[i], plain.data_as<float>()[i]) << i;
    // The next step uses the scale of this step's amax.
    EXPECT_EQ(r.state[0].data_as<float>()[0], 448.0f / max_abs(c.a));
    EXPECT_EQ(r.state[1].data_as<float>()[0], 57344.0f / max_abs(c.b));
  }
}

// --numerics: an armed recorder that watches the node gets both operands' counts (a: tiny
// values that e4m3 at unit scale flushes to zero; b: values past 448 clamped), unarmed none.
TEST(QuantizedGemmTest, WatchedOperandsReportWhatTheirCastsLost) {
  ExecContext ctx;
  ctx.numerics = std::make_shared<NumericsRecorder>(NumericsScope::quantized);
  ctx.numerics->watch("test.gemm", "a", "forward", "e4m3");
  ctx.numerics->watch("test.gemm", "b", "forward", "e4m3");
  Tensor a = Tensor::from_vector(std::vector<float>{1e-4f, 2.0f, -1e-5f, 1.0f}, {2, 2});
  Tensor b = Tensor::from_vector(std::vector<float>{500.0f, 1.0f, -3.0f, -1000.0f}, {2, 2});
  const GemmQuant q = recipe(Scaling::none, ElementFormat::e4m3, ElementFormat::e4m3);
  run_quantized(OpKind::MatMul, MatMulAttrs{}, q, a, b, {2, 2}, ctx);
  EXPECT_FALSE(ctx.numerics->entries()[0].written);
  ctx.numerics->arm(true);
  run_quantized(OpKind::MatMul, MatMulAttrs{}, q, a, b, {2, 2}, ctx);
  const NumericsEntry &ea = ctx.numerics->entries()[0], &eb = ctx.numerics->entries()[1];
  ASSERT_TRUE(ea.written && eb.written);
  EXPECT_EQ(ea.numerics.counts.elements, 4);
  EXPECT_EQ(ea.numerics.counts.underflow, 2);
  EXPECT_EQ(ea.numerics.counts.saturated, 0);
  EXPECT_EQ(ea.numerics.scale, 1.0f);
  EXPECT_EQ(eb.numerics.counts.saturated, 2);
  EXPECT_EQ(eb.numerics.counts.underflow, 0);
  EXPECT_EQ(eb.numerics.counts.amax, 1000.0f);
}

}  // namespace
}  // namespace campo
