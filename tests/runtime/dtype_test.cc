// f32 <-> f16 / bf16 conversions: rounding cases and vectorized == scalar bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/check.h"
#include "runtime/dtype.h"
#include "runtime/rng.h"

namespace campo {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), Error);
}

TEST(DTypeTest, F16RoundTripOfEveryHalf) {
  // Every finite f16 converts to f32 and back unchanged; NaNs stay NaNs.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_bits_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0);
      continue;
    }
    ASSERT_EQ(f32_to_f16_bits(f), h) << "half bits " << h;
  }
}

TEST(DTypeTest, F16RoundingCases) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);      // largest finite
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);      // rounds up to inf
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7bff);      // just below the tie
  EXPECT_EQ(f32_to_f16_bits(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(-INFINITY), 0xfc00);
  // Ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> 1 (even).
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 -> 1 + 2^-9.
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Subnormals: smallest 2^-24, half of it ties to zero (even), slightly more rounds up.
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp ties to even (2)
  EXPECT_EQ(f32_to_f16_bits(-std::ldexp(1.0f, -14)), 0x8400);  // smallest normal
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  uint16_t nan = f32_to_f16_bits(std::nanf(""));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(nan)));
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));
}

TEST(DTypeTest, BF16RoundingCases) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits_to_f32(0x3f80), 1.0f);
  // Ties to even at bit 16.
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f7fffffu)), 0x7f80);  // max float -> inf
  EXPECT_EQ(f32_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x00000001u)), 0x0000);  // tiny subnormal -> 0
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x00010000u)), 0x0001);  // subnormal kept
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x00018000u)), 0x0002);  // subnormal tie to even
  uint16_t nan = f32_to_bf16_bits(from_bits(0x7f800001u));       // signalling NaN
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(nan)));
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0xffc00000u)), 0xffc0);
}

TEST(DTypeTest, VectorizedMatchesScalarBitForBit) {
  // Random bit patterns (all classes: NaN, inf, subnormal) plus many sizes (tails).
  Rng rng(7);
  std::vector<float> src(300000);
  for (auto& v : src) v = from_bits(uint32_t(rng.next_u64()));
  for (size_t i = 0; i < 1000; ++i) src[i] = rng.normal() * 1e-6f;  // f16 subnormal range
  for (DType t : {DType::f16, DType::bf16}) {
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(16), size_t(17), size_t(1023),
                     src.size()}) {
      std::vector<uint16_t> fast(n), slow(n);
      convert(src.data(), DType::f32, fast.data(), t, n);
      convert_scalar(src.data(), DType::f32, slow.data(), t, n);
      ASSERT_EQ(fast, slow) << dtype_name(t) << " n=" << n;
      std::vector<float> back_fast(n), back_slow(n);
      convert(fast.data(), t, back_fast.data(), DType::f32, n);
      convert_scalar(fast.data(), t, back_slow.data(), DType::f32, n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(to_bits(back_fast[i]), to_bits(back_slow[i]));
    }
  }
}

TEST(DTypeTest, F16ToBF16GoesThroughF32) {
  std::vector<uint16_t> h = {0x3c00, 0xc000, 0x7c00, 0x0001};
  std::vector<uint16_t> b(h.size());
  convert(h.data(), DType::f16, b.data(), DType::bf16, h.size());
  for (size_t i = 0; i < h.size(); ++i)
    EXPECT_EQ(b[i], f32_to_bf16_bits(f16_bits_to_f32(h[i])));
}

}  // namespace
}  // namespace campo
