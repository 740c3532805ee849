// Stochastic rounding of f32 to bf16 (runtime/stochastic_rounding.h): only the two
// neighbours, upwards exactly when the random bits reach 2^16 minus the dropped bits, unbiased
// over many draws (positive, negative and subnormal values), bf16 values unchanged, inf and
// NaN kept; the array form is the scalar one on Philox's lanes, whatever the chunking.
#include "runtime/stochastic_rounding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/dtype.h"

namespace campo {
namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

// x's bf16 neighbours towards and away from zero.
float towards_zero(float x) { return from_bits(to_bits(x) & 0xffff0000u); }
float away_from_zero(float x) { return bf16_bits_to_f32(uint16_t((to_bits(x) >> 16) + 1)); }

TEST(StochasticRoundingTest, GoesToANeighbourAtTheExactThreshold) {
  for (const float x : {1.3f, -1.3f, 3.0e-39f, -7.5e30f, 0.0999f}) {
    SCOPED_TRACE(x);
    const uint32_t dropped = to_bits(x) & 0xffffu;
    ASSERT_NE(dropped, 0u);
    const uint16_t threshold = uint16_t(0x10000u - dropped);
    EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_stochastic(x, uint16_t(threshold - 1))),
              towards_zero(x));
    EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_stochastic(x, threshold)), away_from_zero(x));
    EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_stochastic(x, 0)), towards_zero(x));
    EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_stochastic(x, 0xffff)), away_from_zero(x));
  }
}

TEST(StochasticRoundingTest, KeepsBf16ValuesInfinityAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float x : {0.0f, -0.0f, 1.0f, -2.5f, 0x1p-133f, inf, -inf}) {
    for (const uint16_t r : {uint16_t(0), uint16_t(0x8000), uint16_t(0xffff)})
      EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_stochastic(x, r)), x) << x << " r " << r;
  }
  for (const uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fffffffu}) {
    const uint16_t b = f32_to_bf16_stochastic(from_bits(nan), 0xffff);
    EXPECT_TRUE(std::isnan(bf16_bits_to_f32(b))) << std::hex << nan;
    EXPECT_EQ(b & 0x8000u, (nan >> 16) & 0x8000u) << std::hex << nan;
  }
  // Above the largest finite bf16 the next point of the grid is 2^128: inf.
  const float beyond = from_bits(0x7f7f8000u);
  EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_stochastic(beyond, 0x8000)), inf);
  EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_stochastic(beyond, 0x7fff)), from_bits(0x7f7f0000u));
}

// The mean of 2^18 draws is x within 5 standard deviations of the mean
// (ulp sqrt(p (1 - p) / n)), where plain rounding to nearest would be off by p or 1 - p ulps.
TEST(StochasticRoundingTest, MeanOverManyDrawsIsTheValue) {
  constexpr size_t kDraws = size_t(1) << 18;
  for (const float x : {1.0f + 0.3f * 0x1p-7f, -0.1f, 0.7f * 0x1p-130f, 12345.678f}) {
    SCOPED_TRACE(x);
    const std::vector<float> src(kDraws, x);
    std::vector<uint16_t> dst(kDraws);
    f32_to_bf16_stochastic(src.data(), dst.data(), kDraws, 42, 7, 0);
    double sum = 0;
    for (uint16_t b : dst) sum += bf16_bits_to_f32(b);
    const double ulp = double(away_from_zero(x)) - double(towards_zero(x));
    const double p = (double(x) - double(towards_zero(x))) / ulp;
    const double sigma = std::abs(ulp) * std::sqrt(p * (1 - p) / double(kDraws));
    EXPECT_NEAR(sum / double(kDraws), double(x), 5 * sigma) << "p " << p;
    const float nearest = bf16_bits_to_f32(f32_to_bf16_bits(x));
    EXPECT_GT(std::abs(double(nearest) - double(x)), 5 * sigma);  // far more biased
  }
}

TEST(StochasticRoundingTest, ArrayIsTheScalarOnPhiloxLanesInAnyPieces) {
  std::vector<float> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0.01f * float(i) - 3.3333f;
  std::vector<uint16_t> whole(src.size()), pieces(src.size());
  const uint64_t seed = 0x1234567890ull, stream = 0xfedcba9876543210ull, first = 5;
  f32_to_bf16_stochastic(src.data(), whole.data(), src.size(), seed, stream, first);
  for (size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(whole[i], f32_to_bf16_stochastic(src[i], philox_bits16(seed, stream, first + i)))
        << i;
  // Pieces that start inside a Philox block give the same bits.
  for (size_t begin = 0; begin < src.size();) {
    const size_t n = std::min<size_t>(src.size() - begin, 3 + begin % 11);
    f32_to_bf16_stochastic(src.data() + begin, pieces.data() + begin, n, seed, stream,
                           first + begin);
    begin += n;
  }
  EXPECT_EQ(whole, pieces);
  // Another stream or seed draws other bits.
  std::vector<uint16_t> other(src.size());
  f32_to_bf16_stochastic(src.data(), other.data(), src.size(), seed, stream + 1, first);
  EXPECT_NE(whole, other);
  f32_to_bf16_stochastic(src.data(), other.data(), src.size(), seed + 1, stream, first);
  EXPECT_NE(whole, other);
}

TEST(StochasticRoundingTest, Bits16AreTheLanesOfOneBlock) {
  const uint64_t seed = 0x0123456789abcdefull, stream = 77;
  const auto block = philox4x32_10({2, 0, 77, 0}, {0x89abcdef, 0x01234567});
  for (unsigned lane = 0; lane < 8; ++lane)
    EXPECT_EQ(philox_bits16(seed, stream, 16 + lane),
              uint16_t(block[lane / 2] >> (16 * (lane % 2))))
        << lane;
}

}  // namespace
}  // namespace campo
