// Scaling recipes of quantized GEMM operands (runtime/gemm_quant.h): TE's scale rule, the
// delayed recipe's amax history (max, most_recent, margin), current scaling, unit scaling
// that saturates, MX blocks along a strided axis against runtime/mx.h, and stochastic
// rounding that depends only on (seed, operand, step).
#include "runtime/gemm_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/mx.h"

namespace campo {
namespace {

// One operand quantized once: dst, the returned inverse scale, the state after.
struct Quantized {
  std::vector<float> dst;
  float inv_scale;
};

Quantized quantize(const GemmQuant& q, std::vector<float>& state, const std::vector<float>& x,
                   BlockAxis axis = {}, int operand = 0, uint64_t seed = 7) {
  if (axis.length == 1 && axis.outer == 1 && axis.inner == 1) axis.length = int64_t(x.size());
  Quantized r{std::vector<float>(x.size()), 0.0f};
  std::vector<uint8_t> codes(x.size());
  r.inv_scale = quantize_gemm_operand(q, operand, state, x, r.dst, codes, axis, seed, 42);
  return r;
}

GemmQuant fp8(Scaling scaling, int history = 4, AmaxReduction amax = AmaxReduction::max,
              int margin = 0) {
  GemmQuant q;
  q.enabled = true;
  q.format = "fp8_e4m3";
  q.recipe = {.scaling = scaling, .history = history, .amax = amax, .margin = margin};
  return q;
}

TEST(GemmQuantTest, ScaleIsMaxOverAmaxOverTwoToTheMargin) {
  EXPECT_EQ(scale_from_amax(2.0f, 448.0f, 0, 1.0f), 224.0f);
  EXPECT_EQ(scale_from_amax(2.0f, 448.0f, 3, 1.0f), 28.0f);
  EXPECT_EQ(scale_from_amax(3.0f, 57344.0f, 0, 1.0f), 57344.0f / 3.0f);
  // amax 0, inf or NaN, or a scale beyond f32: the previous scale.
  EXPECT_EQ(scale_from_amax(0.0f, 448.0f, 0, 5.0f), 5.0f);
  EXPECT_EQ(scale_from_amax(INFINITY, 448.0f, 0, 5.0f), 5.0f);
  EXPECT_EQ(scale_from_amax(NAN, 448.0f, 0, 5.0f), 5.0f);
  EXPECT_EQ(scale_from_amax(1e-40f, 448.0f, 0, 5.0f), 5.0f);
}

TEST(GemmQuantTest, AmaxHistoryKeepsTheLastEntriesMostRecentFirst) {
  std::vector<float> h(3, 0.0f);
  EXPECT_EQ(push_amax_history(h, 4.0f, AmaxReduction::max), 4.0f);
  EXPECT_EQ(push_amax_history(h, 1.0f, AmaxReduction::max), 4.0f);
  EXPECT_EQ(push_amax_history(h, 2.0f, AmaxReduction::most_recent), 2.0f);
  EXPECT_EQ(h, (std::vector<float>{2.0f, 1.0f, 4.0f}));
  EXPECT_EQ(push_amax_history(h, 0.5f, AmaxReduction::max), 2.0f);  // 4 dropped
  EXPECT_EQ(h, (std::vector<float>{0.5f, 2.0f, 1.0f}));
  EXPECT_EQ(tensor_amax(std::vector<float>{1.0f, -3.0f, 2.0f}), 3.0f);
  EXPECT_EQ(tensor_amax(std::vector<float>{1.0f, NAN}), INFINITY);
}

// Delayed scaling: step t uses the scale of the history before it; amaxes 4, 1, 0.5 with a
// history of 2.
TEST(GemmQuantTest, DelayedScalingUsesTheHistoryBeforeTheStep) {
  for (AmaxReduction reduction : {AmaxReduction::max, AmaxReduction::most_recent}) {
    SCOPED_TRACE(amax_reduction_name(reduction));
    const GemmQuant q = fp8(Scaling::delayed, 2, reduction);
    std::vector<float> state(size_t(gemm_quant_state_size(q.recipe)), 0.0f);
    ASSERT_EQ(state.size(), 4u);
    Quantized a = quantize(q, state, {4.0f, -1.0f});  // scale 1 (nothing seen yet)
    EXPECT_EQ(a.inv_scale, 1.0f);
    EXPECT_EQ(a.dst, (std::vector<float>{4.0f, -1.0f}));
    EXPECT_EQ(state[0], 112.0f);  // 448 / 4
    EXPECT_EQ(state[1], 1.0f);
    Quantized b = quantize(q, state, {1.0f});
    EXPECT_EQ(b.inv_scale, 1.0f / 112.0f);
    EXPECT_EQ(b.dst, (std::vector<float>{112.0f}));
    EXPECT_EQ(state[0], reduction == AmaxReduction::max ? 112.0f : 448.0f);
    quantize(q, state, {0.5f});
    // The history holds 0.5 and 1 (4 dropped): max 1, most recent 0.5.
    EXPECT_EQ(state[0], reduction == AmaxReduction::max ? 448.0f : 896.0f);
    EXPECT_EQ(state[1], 3.0f);
    EXPECT_EQ(std::vector<float>(state.begin() + 2, state.end()), (std::vector<float>{0.5f, 1.0f}));
  }
  // Margin 2: a quarter of the scale.
  const GemmQuant q = fp8(Scaling::delayed, 2, AmaxReduction::max, 2);
  std::vector<float> state(4, 0.0f);
  quantize(q, state, {4.0f});
  EXPECT_EQ(state[0], 28.0f);
  // A non-finite operand leaves history and scale alone.
  quantize(q, state, {INFINITY});
  EXPECT_EQ(state[0], 28.0f);
  EXPECT_EQ(state[2], 4.0f);
}

TEST(GemmQuantTest, CurrentScalingMapsTheAmaxOntoMaxFinite) {
  const GemmQuant q = fp8(Scaling::current);
  std::vector<float> state(2, 0.0f);
  Quantized r = quantize(q, state, {0.1f, -0.5f, 0.25f});
  const float scale = 448.0f / 0.5f;
  EXPECT_EQ(r.inv_scale, 1.0f / scale);
  EXPECT_EQ(state[0], scale);
  EXPECT_EQ(r.dst[1], -448.0f);
  EXPECT_EQ(r.dst[2], 224.0f);
  EXPECT_EQ(r.dst[0],
            decode(ElementFormat::e4m3,
                   encode_nearest_even(ElementFormat::e4m3, 0.1f * scale, Saturation::saturating)));
}

TEST(GemmQuantTest, NoScalingSaturatesUnlessTheRecipeSaysOtherwise) {
  GemmQuant q = fp8(Scaling::none);
  std::vector<float> state(2, 0.0f);
  Quantized r = quantize(q, state, {1000.0f, -1e9f, 3.0f, 1e-4f});
  EXPECT_EQ(r.inv_scale, 1.0f);
  EXPECT_EQ(r.dst, (std::vector<float>{448.0f, -448.0f, 3.0f, 0.0f}));
  q.element = {ElementFormat::e5m2, ElementFormat::e5m2};
  r = quantize(q, state, {1e5f});
  EXPECT_EQ(r.dst[0], 57344.0f);
  q.recipe.saturation = Saturation::non_saturating;
  r = quantize(q, state, {1e5f});
  EXPECT_EQ(r.dst[0], INFINITY);
  q.element = {ElementFormat::e4m3, ElementFormat::e4m3};
  r = quantize(q, state, {1000.0f});
  EXPECT_TRUE(std::isnan(r.dst[0]));
}

// MX blocks along the middle axis of [2, 40, 3] equal mx_quantize of each gathered row.
TEST(GemmQuantTest, MxBlocksRunAlongTheReductionAxis) {
  for (ElementFormat f : {ElementFormat::e4m3, ElementFormat::e2m1}) {
    GemmQuant q;
    q.enabled = true;
    q.blocks = true;
    q.format = "mx";
    q.element = {f, f};
    q.recipe.scaling = Scaling::mx;
    const BlockAxis axis{2, 40, 3};
    std::vector<float> x(240);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.7f) * float(1 + i % 7);
    std::vector<float> state(2, 0.0f);
    const Quantized r = quantize(q, state, x, axis);
    EXPECT_EQ(r.inv_scale, 1.0f);
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t in = 0; in < 3; ++in) {
        std::vector<float> row(40), back(40);
        for (int64_t k = 0; k < 40; ++k) row[size_t(k)] = x[size_t((o * 40 + k) * 3 + in)];
        std::vector<uint8_t> scales(2), codes(40);
        mx_quantize(f, row, scales, codes);
        mx_dequantize(f, scales, codes, back);
        for (int64_t k = 0; k < 40; ++k)
          ASSERT_EQ(r.dst[size_t((o * 40 + k) * 3 + in)], back[size_t(k)])
              << element_format_name(f) << " o " << o << " in " << in << " k " << k;
      }
  }
}

// Stochastic rounding: the same (seed, operand, step) gives the same codes; the next step, the
// other operand or another seed draw other bits.
TEST(GemmQuantTest, StochasticRoundingDependsOnSeedOperandAndStep) {
  GemmQuant q = fp8(Scaling::none);
  q.rounding = Rounding::stochastic;
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + float(i % 97) / 97.0f;
  std::vector<float> s1(2, 0.0f), s2(2, 0.0f);
  const Quantized a = quantize(q, s1, x), b = quantize(q, s2, x);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_NE(quantize(q, s1, x).dst, a.dst);  // step 2
  std::vector<float> s3(2, 0.0f), s4(2, 0.0f);
  EXPECT_NE(quantize(q, s3, x, {}, 1).dst, a.dst);
  EXPECT_NE(quantize(q, s4, x, {}, 0, 8).dst, a.dst);
  // Every result is one of the two neighbours on the grid.
  for (size_t i = 0; i < x.size(); ++i) {
    const float lo = decode(ElementFormat::e4m3,
                            encode_nearest_even(ElementFormat::e4m3, x[i], Saturation::saturating));
    EXPECT_LE(std::fabs(a.dst[i] - x[i]), 0.125f + 1e-6f) << x[i] << " " << lo;
  }
}

}  // namespace
}  // namespace campo
