// Numerics telemetry (runtime/numerics.h): what quantizing a GEMM operand loses, counted in the
// quantization's own pass (runtime/gemm_quant.h), against hand-computed cases of every recipe
// kind and against a per-element count on a large operand (any thread count: the same record,
// and the same quantized bits as without counting); the recorder's entries.
#include "runtime/numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/gemm_quant.h"
#include "runtime/rng.h"

namespace campo {
namespace {

GemmQuant quant(Scaling scaling, ElementFormat f, Saturation saturation = Saturation::saturating) {
  GemmQuant q;
  q.enabled = true;
  q.blocks = scaling == Scaling::mx;
  q.format = "test";
  q.element = {f, f};
  q.recipe.scaling = scaling;
  q.recipe.history = 2;
  q.recipe.saturation = saturation;
  return q;
}

// One quantization of x as operand 0, counted; `dst` gets the quantized operand.
CastNumerics counted(const GemmQuant& q, const std::vector<float>& x,
                     std::vector<float>* dst = nullptr) {
  std::vector<float> state(size_t(gemm_quant_state_size(q.recipe)), 0.0f), out(x.size());
  std::vector<uint8_t> codes(x.size());
  CastNumerics n;
  quantize_gemm_operand(q, 0, state, x, out, codes, {1, int64_t(x.size()), 1}, 7, 42, &n);
  if (dst) *dst = out;
  return n;
}

// e4m3 at scale 1: max 448, smallest subnormal 2^-9, so below 2^-10 rounds to zero.
TEST(NumericsTest, UnitScaleCountsUnderflowSaturationAndNonFiniteInputs) {
  const CastNumerics n =
      counted(quant(Scaling::none, ElementFormat::e4m3),
              {1000.0f, -1e9f, 3.0f, 1e-4f, 0.0f, NAN, INFINITY, -INFINITY, 0.0009f, 0.001f});
  const NumericsCounts& c = n.counts;
  EXPECT_EQ(c.elements, 10);
  EXPECT_EQ(c.saturated, 2);  // 1000 and -1e9 clamped to +-448
  EXPECT_EQ(c.underflow, 2);  // 1e-4 and 0.0009 (< 2^-10); 0.001 rounds up to 2^-9; 0 is 0
  EXPECT_EQ(c.overflow, 0);
  EXPECT_EQ(c.nan, 1);
  EXPECT_EQ(c.inf, 2);
  EXPECT_EQ(c.amax, 1e9f);  // of the finite inputs
  EXPECT_EQ(n.scale, 1.0f);
}

// Non-saturating e5m2 (max 57344, the next step up 65536): 1e5 overflows to inf; 60000 rounds
// to 57344 (below the midpoint 61440) as rounding to nearest does anywhere: not saturated;
// 57344 itself loses nothing.
TEST(NumericsTest, NonSaturatingFormatsOverflow) {
  const CastNumerics n =
      counted(quant(Scaling::none, ElementFormat::e5m2, Saturation::non_saturating),
              {1e5f, 60000.0f, 57344.0f, -1e5f});
  EXPECT_EQ(n.counts.overflow, 2);
  EXPECT_EQ(n.counts.saturated, 0);
  EXPECT_EQ(n.counts.underflow, 0);
}

// Saturated means clamped where rounding to nearest would have left the range: past the
// midpoint above max_finite (e4m3: 464, e5m2: 61440), not merely above max_finite.
TEST(NumericsTest, SaturatedStartsAtTheRoundingMidpointAboveMaxFinite) {
  EXPECT_EQ(saturation_bound(ElementFormat::e4m3), 464.0);
  EXPECT_EQ(saturation_bound(ElementFormat::e5m2), 61440.0);
  EXPECT_EQ(saturation_bound(ElementFormat::e2m1), 7.0);
  EXPECT_EQ(saturation_bound(ElementFormat::e2m3), 7.75);
  EXPECT_EQ(saturation_bound(ElementFormat::e3m2), 30.0);
  const CastNumerics e5 =
      counted(quant(Scaling::none, ElementFormat::e5m2), {60000.0f, 61000.0f, 62000.0f, -1e6f});
  EXPECT_EQ(e5.counts.saturated, 2);  // 62000 and -1e6
  EXPECT_EQ(e5.counts.overflow, 0);
  // Current scaling puts amax on max_finite; x * scale may land an f32 ulp above 448 for the
  // elements at amax: they lose nothing and are not counted.
  std::vector<float> x(64, 2.0226629f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = 0.5f;
  const CastNumerics cur = counted(quant(Scaling::current, ElementFormat::e4m3), x);
  EXPECT_EQ(cur.counts.saturated, 0);
  EXPECT_EQ(cur.counts.amax, 2.0226629f);
}

// Current scaling puts amax 0.5 on 448 (scale 896): 1e-6 becomes 0.000896 < 2^-10, zero.
TEST(NumericsTest, CurrentScalingReportsItsScale) {
  const CastNumerics n =
      counted(quant(Scaling::current, ElementFormat::e4m3), {0.5f, -0.25f, 1e-6f, 0.0f});
  EXPECT_EQ(n.scale, 896.0f);
  EXPECT_EQ(n.counts.underflow, 1);
  EXPECT_EQ(n.counts.saturated, 0);
  EXPECT_EQ(n.counts.amax, 0.5f);
}

// MXFP4 (e2m1: max 6, emax 2, smallest 0.5): a block of {15, 0.1, 0 x 30} has the scale
// 2^(floor(log2 15) - 2) = 2: 15 / 2 = 7.5 clamps to 6 (saturated: |15| > 2 * 7, 7 the
// midpoint between 6 and the next step 8) and
// 0.1 / 2 = 0.05 rounds to 0 (underflow). No per-tensor scale.
TEST(NumericsTest, MxBlocksCountAtTheirOwnScale) {
  std::vector<float> x(32, 0.0f);
  x[0] = 15.0f;
  x[1] = 0.1f;
  std::vector<float> dst;
  const CastNumerics n = counted(quant(Scaling::mx, ElementFormat::e2m1), x, &dst);
  EXPECT_EQ(dst[0], 12.0f);
  EXPECT_EQ(dst[1], 0.0f);
  EXPECT_EQ(n.counts.elements, 32);
  EXPECT_EQ(n.counts.saturated, 1);
  EXPECT_EQ(n.counts.underflow, 1);
  EXPECT_EQ(n.counts.amax, 15.0f);
  EXPECT_TRUE(std::isnan(n.scale));
}

// A large operand (split over the team in chunks): the counts equal a plain per-element count
// from the specification's encode, and the quantized values are those of an uncounted run.
TEST(NumericsTest, LargeOperandCountsMatchAPerElementCount) {
  Rng rng(3);
  std::vector<float> x(200003);
  for (float& v : x) v = std::ldexp(rng.uniform(-1.0f, 1.0f), int(rng.uniform(-30.0f, 12.0f)));
  x[17] = NAN;
  const GemmQuant q = quant(Scaling::none, ElementFormat::e4m3);
  std::vector<float> with, without;
  const CastNumerics n = counted(q, x, &with);
  std::vector<float> state(2, 0.0f);
  without.resize(x.size());
  std::vector<uint8_t> codes(x.size());
  quantize_gemm_operand(q, 0, state, x, without, codes, {1, int64_t(x.size()), 1}, 7, 42);
  EXPECT_EQ(0, std::memcmp(with.data(), without.data(), x.size() * sizeof(float)));
  NumericsCounts expected;
  expected.elements = int64_t(x.size());
  for (float v : x)
    expected.count(v,
                   decode(ElementFormat::e4m3,
                          encode_nearest_even(ElementFormat::e4m3, v, Saturation::saturating)),
                   saturation_bound(ElementFormat::e4m3));
  EXPECT_GT(expected.underflow, 0);
  EXPECT_GT(expected.saturated, 0);
  EXPECT_EQ(n.counts.elements, expected.elements);
  EXPECT_EQ(n.counts.underflow, expected.underflow);
  EXPECT_EQ(n.counts.saturated, expected.saturated);
  EXPECT_EQ(n.counts.nan, 1);
  EXPECT_EQ(n.counts.amax, expected.amax);
}

TEST(NumericsTest, RecorderFindsWatchedTensorsAndClearsThemWhenArmed) {
  NumericsRecorder r(NumericsScope::quantized);
  r.watch("fc1.MatMul", "a", "forward", "e4m3");
  r.watch("fc1.MatMul", "b", "forward", "e4m3");
  EXPECT_EQ(r.find("fc1.MatMul", "b"), 1);
  EXPECT_EQ(r.find("fc2.MatMul", "a"), -1);
  r.arm(true);
  CastNumerics n;
  n.counts.underflow = 3;
  r.write(1, n);
  EXPECT_TRUE(r.entries()[1].written);
  EXPECT_FALSE(r.entries()[0].written);
  EXPECT_EQ(r.entries()[1].numerics.counts.underflow, 3);
  r.arm(false);
  EXPECT_THROW(r.write(0, n), std::exception);
  r.arm(true);
  EXPECT_FALSE(r.entries()[1].written);
  EXPECT_EQ(parse_numerics_scope("all"), NumericsScope::all);
  EXPECT_THROW(parse_numerics_scope("some"), std::exception);
}

}  // namespace
}  // namespace campo
