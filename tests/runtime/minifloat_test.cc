// FP8/FP6/FP4 element formats (runtime/minifloat.h) against ml_dtypes: every code decoded,
// ~23,000 f32 inputs and every bf16 value encoded with round-to-nearest-even, saturating and
// not (tables in tests/runtime/data/minifloat/, from its make_tables.py). Stochastic
// rounding: only the two neighbours, exact thresholds, unbiased, reproducible on any thread
// count. Philox against Random123's known answers.
#include "runtime/minifloat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "runtime/check.h"
#include "runtime/philox.h"
#include "runtime/rng.h"
#include "tests/runtime/minifloat_test_util.h"

namespace campo {
namespace {

using testing::kEncodeColumns;
using testing::ScopedOmpThreads;

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

constexpr ElementFormat kAllFormats[] = {ElementFormat::e4m3, ElementFormat::e5m2,
                                         ElementFormat::e2m3, ElementFormat::e3m2,
                                         ElementFormat::e2m1};

TEST(PhiloxTest, RandomOneTwoThreeKnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  using Words = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, Bits64AreTheBlockOfTheirPair) {
  const uint64_t seed = 0x0123456789abcdefull, stream = 77;
  const auto block = philox4x32_10({5, 0, 77, 0}, {0x89abcdef, 0x01234567});
  EXPECT_EQ(philox_bits64(seed, stream, 10), (uint64_t(block[1]) << 32) | block[0]);
  EXPECT_EQ(philox_bits64(seed, stream, 11), (uint64_t(block[3]) << 32) | block[2]);
  // Index, stream and seed all change the bits (their high halves too).
  const uint64_t base = philox_bits64(seed, stream, 10);
  EXPECT_NE(base, philox_bits64(seed, stream, 10 + (uint64_t(1) << 40)));
  EXPECT_NE(base, philox_bits64(seed, stream + (uint64_t(1) << 40), 10));
  EXPECT_NE(base, philox_bits64(seed ^ (uint64_t(1) << 50), stream, 10));
}

TEST(MinifloatTest, FormatTableAgreesWithItsCodes) {
  for (ElementFormat f : kAllFormats) {
    const auto& info = element_format_info(f);
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.bits, 1 + info.exponent_bits + info.mantissa_bits);
    EXPECT_EQ(info.emin, 1 - info.bias);
    EXPECT_EQ(decode(f, info.max_magnitude), info.max_finite);
    EXPECT_EQ(decode(f, 1), info.min_subnormal);
    EXPECT_EQ(std::ilogb(info.max_finite), info.emax);
    EXPECT_EQ(parse_element_format(info.name), f);
  }
  EXPECT_EQ(element_format_info(ElementFormat::e4m3).max_finite, 448.0f);
  EXPECT_EQ(element_format_info(ElementFormat::e5m2).max_finite, 57344.0f);
}

TEST(MinifloatTest, ParsesAliasesAndRefusesOthers) {
  EXPECT_EQ(parse_element_format("fp8_e4m3"), ElementFormat::e4m3);
  EXPECT_EQ(parse_element_format("float8_e4m3fn"), ElementFormat::e4m3);
  EXPECT_EQ(parse_element_format("E5M2"), ElementFormat::e5m2);
  EXPECT_EQ(parse_element_format("float6_e3m2fn"), ElementFormat::e3m2);
  EXPECT_EQ(parse_element_format("fp4_e2m1"), ElementFormat::e2m1);
  EXPECT_THROW(parse_element_format("e4m4"), Error);
  EXPECT_THROW(parse_element_format(""), Error);
  try {
    parse_element_format("fp7");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fp7'"), std::string::npos) << e.what();
  }
}

TEST(MinifloatTest, DecodesEveryCodeAsMlDtypes) {
  const std::string path = testing::minifloat_table_path("decode.txt");
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string name;
  unsigned code, bits;
  int rows = 0, nans = 0;
  while (in >> name >> std::hex >> code >> bits >> std::dec) {
    ++rows;
    const float expected = from_bits(bits);
    const float got = name == "e8m0" ? e8m0_to_f32(uint8_t(code))
                                     : decode(parse_element_format(name), uint8_t(code));
    if (std::isnan(expected)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << name << " code " << code;
      EXPECT_EQ(std::signbit(got), std::signbit(expected)) << name << " code " << code;
    } else {
      EXPECT_EQ(to_bits(got), bits) << name << " code " << std::hex << code << ": " << got
                                    << " (ml_dtypes " << expected << ")";
    }
  }
  // 256 + 256 + 64 + 64 + 16 codes and E8M0's 256; NaNs: e4m3 2, e5m2 6, e8m0 1.
  EXPECT_EQ(rows, 912);
  EXPECT_EQ(nans, 9);
}

TEST(MinifloatTest, NarrowCodesIgnoreTheirUpperBits) {
  EXPECT_EQ(decode(ElementFormat::e2m1, 0xf7), 6.0f);
  EXPECT_EQ(decode(ElementFormat::e2m1, 0x0f), -6.0f);
  EXPECT_EQ(decode(ElementFormat::e3m2, 0xdf), 28.0f);
  EXPECT_EQ(decode(ElementFormat::e2m3, 0x60), -0.0f);
  EXPECT_TRUE(std::signbit(decode(ElementFormat::e2m3, 0x60)));
}

// ml_dtypes 0.7.0 casts a NaN into its FP6/FP4 types (which have no NaN) as a zero of the
// opposite sign (+NaN -> -0); campo keeps the sign (+NaN -> +0). Inside an MX block, where
// these formats live, a NaN makes the block's scale NaN and the element does not matter.
bool is_fp6_fp4_nan_case(ElementFormat f, float x) {
  return std::isnan(x) && !element_format_info(f).has_nan;
}

TEST(MinifloatTest, EncodesF32AsMlDtypes) {
  const auto records = testing::read_encode_f32_table();
  ASSERT_GT(records.size(), 20000u);
  int failures = 0, compared = 0, nan_cases = 0;
  for (const auto& r : records) {
    const float x = from_bits(r.input_bits);
    for (size_t c = 0; c < kEncodeColumns.size(); ++c) {
      const auto [f, saturation] = kEncodeColumns[c];
      const uint8_t got = encode_nearest_even(f, x, saturation);
      if (is_fp6_fp4_nan_case(f, x)) {
        ++nan_cases;
        EXPECT_EQ(got, std::signbit(x) ? 1u << (element_format_info(f).bits - 1) : 0u);
        EXPECT_EQ(r.codes[c], std::signbit(x) ? 0u : 1u << (element_format_info(f).bits - 1));
        continue;
      }
      ++compared;
      if (got != r.codes[c] && ++failures <= 20)
        ADD_FAILURE() << element_format_name(f)
                      << (saturation == Saturation::saturating ? " saturating" : " non-saturating")
                      << ": f32 0x" << std::hex << r.input_bits << " (" << x << ") -> 0x"
                      << int(got) << ", ml_dtypes 0x" << int(r.codes[c]);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << compared << " conversions";
  EXPECT_GT(nan_cases, 0);
}

TEST(MinifloatTest, ArrayEncodeGivesTheTableBitsOnAnyThreadCount) {
  const auto records = testing::read_encode_f32_table();
  // Repeated past the parallel threshold, so that the OpenMP path runs.
  std::vector<float> x;
  while (x.size() < 100000)
    for (const auto& r : records) x.push_back(from_bits(r.input_bits));
  for (size_t c = 0; c < kEncodeColumns.size(); ++c) {
    const auto [f, saturation] = kEncodeColumns[c];
    for (int threads : {1, 3}) {
      ScopedOmpThreads scoped(threads);
      std::vector<uint8_t> codes(x.size());
      encode(f, x, codes, {.saturation = saturation});
      size_t wrong = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const auto& r = records[i % records.size()];
        if (!is_fp6_fp4_nan_case(f, x[i])) wrong += codes[i] != r.codes[c];
      }
      EXPECT_EQ(wrong, 0u) << element_format_name(f) << " column " << c << ", " << threads
                           << " threads";
    }
  }
}

TEST(MinifloatTest, EncodesEveryBf16AsMlDtypes) {
  const auto records = testing::read_encode_bf16_table();
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  for (size_t c = 0; c < kEncodeColumns.size(); ++c) {
    const auto [f, saturation] = kEncodeColumns[c];
    std::vector<uint8_t> array_codes(all.size());
    encode_bf16(f, all, array_codes, {.saturation = saturation});
    int failures = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const uint8_t got = encode_bf16_nearest_even(f, all[i], saturation);
      EXPECT_EQ(array_codes[i], got);
      if (is_fp6_fp4_nan_case(f, from_bits(uint32_t(i) << 16))) continue;
      if (got != records[i].codes[c] && ++failures <= 10)
        ADD_FAILURE() << element_format_name(f) << " column " << c << ": bf16 0x" << std::hex << i
                      << " -> 0x" << int(got) << ", ml_dtypes 0x" << int(records[i].codes[c]);
    }
    EXPECT_EQ(failures, 0) << element_format_name(f) << " column " << c;
  }
}

TEST(MinifloatTest, EdgeCasesByHand) {
  const auto e4m3 = ElementFormat::e4m3, e5m2 = ElementFormat::e5m2;
  const auto sat = Saturation::saturating, nonsat = Saturation::non_saturating;
  EXPECT_EQ(encode_nearest_even(e4m3, 448.0f, nonsat), 0x7e);
  EXPECT_EQ(encode_nearest_even(e4m3, 463.99f, nonsat), 0x7e);  // below the tie with 480
  EXPECT_EQ(encode_nearest_even(e4m3, 464.0f, nonsat), 0x7e);   // tie: 448 is even
  EXPECT_EQ(encode_nearest_even(e4m3, 464.01f, nonsat), 0x7f);  // past it: NaN
  EXPECT_EQ(encode_nearest_even(e4m3, -1e30f, sat), 0xfe);
  EXPECT_EQ(encode_nearest_even(e4m3, INFINITY, sat), 0x7e);
  EXPECT_EQ(encode_nearest_even(e4m3, -INFINITY, nonsat), 0xff);
  EXPECT_EQ(encode_nearest_even(e5m2, 61440.0f, nonsat), 0x7c);  // tie: 2^16 is even -> inf
  EXPECT_EQ(encode_nearest_even(e5m2, 61439.0f, nonsat), 0x7b);
  EXPECT_EQ(encode_nearest_even(e5m2, -INFINITY, nonsat), 0xfc);
  EXPECT_EQ(encode_nearest_even(e5m2, -INFINITY, sat), 0xfb);
  EXPECT_EQ(encode_nearest_even(e5m2, from_bits(0xffa00000), sat), 0xfe);  // NaN keeps sign
  // Subnormals: e4m3's smallest is 2^-9; half of it ties to zero, a bit more rounds up.
  EXPECT_EQ(encode_nearest_even(e4m3, std::ldexp(1.0f, -10), sat), 0x00);
  EXPECT_EQ(encode_nearest_even(e4m3, std::ldexp(1.0f, -10) * 1.0001f, sat), 0x01);
  EXPECT_EQ(encode_nearest_even(e4m3, -std::ldexp(1.0f, -20), sat), 0x80);  // signed zero
  EXPECT_EQ(encode_nearest_even(e4m3, std::ldexp(15.0f, -10), sat), 0x08);  // carries to 2^-6
  EXPECT_EQ(encode_nearest_even(ElementFormat::e2m1, 5.0f, sat), 0x06);     // 4|6 tie -> 4
  EXPECT_EQ(encode_nearest_even(ElementFormat::e2m1, -0.25f, sat), 0x08);   // tie to -0
  EXPECT_EQ(encode_nearest_even(ElementFormat::e2m1, 0.75f, sat), 0x02);    // tie to 1
}

TEST(MinifloatTest, EveryCodeRoundTrips) {
  for (ElementFormat f : kAllFormats) {
    const int codes = 1 << element_format_info(f).bits;
    for (int code = 0; code < codes; ++code) {
      const float v = decode(f, uint8_t(code));
      if (std::isnan(v)) continue;
      for (auto saturation : {Saturation::saturating, Saturation::non_saturating}) {
        if (std::isinf(v) && saturation == Saturation::saturating) continue;
        EXPECT_EQ(encode_nearest_even(f, v, saturation), code) << element_format_name(f);
        EXPECT_EQ(encode_stochastic(f, v, saturation, 0), code) << element_format_name(f);
      }
    }
  }
}

TEST(MinifloatTest, ScaledEncodingNeverRoundsTheScaling) {
  // 3 * 2^-149 (an f32 subnormal) scaled by 2^140 is 3 * 2^-9: e4m3's subnormal code 3.
  EXPECT_EQ(encode_scaled(ElementFormat::e4m3, from_bits(3), -140, Saturation::saturating,
                          Rounding::nearest_even, 0),
            0x03);
  // 1.5 * 2^100 scaled by 2^-100 is 1.5; by 2^-110 it is 1536, saturated to 448.
  const float big = std::ldexp(1.5f, 100);
  EXPECT_EQ(encode_scaled(ElementFormat::e4m3, big, 100, Saturation::saturating,
                          Rounding::nearest_even, 0),
            encode_nearest_even(ElementFormat::e4m3, 1.5f, Saturation::saturating));
  EXPECT_EQ(encode_scaled(ElementFormat::e4m3, big, 90, Saturation::saturating,
                          Rounding::nearest_even, 0),
            0x7e);
  // Every table input, scaled by 2^k and back, encodes as itself (where the scaled value
  // stays a normal f32, so that the reference is exact).
  Rng rng(7);
  for (int i = 0; i < 20000; ++i) {
    const float x = rng.uniform(-600.0f, 600.0f) * std::ldexp(1.0f, int(rng.below(30)) - 20);
    const int k = int(rng.below(200)) - 100;
    const float scaled = std::ldexp(x, k);
    if (!std::isnormal(scaled)) continue;
    for (ElementFormat f : kAllFormats)
      ASSERT_EQ(encode_scaled(f, scaled, k, Saturation::non_saturating, Rounding::nearest_even, 0),
                encode_nearest_even(f, x, Saturation::non_saturating))
          << element_format_name(f) << " x=" << x << " k=" << k;
  }
}

TEST(MinifloatTest, ArraySizesMustMatch) {
  std::vector<float> x(4), y(3);
  std::vector<uint8_t> codes(3);
  EXPECT_THROW(encode(ElementFormat::e4m3, x, codes), Error);
  EXPECT_THROW(decode(ElementFormat::e4m3, codes, x), Error);
  std::vector<uint16_t> b(2);
  EXPECT_THROW(encode_bf16(ElementFormat::e4m3, b, codes), Error);
}

// ---- Stochastic rounding ------------------------------------------------------------------

// The finite values of a format, sorted: neighbours are found here, not by the encoder.
std::vector<double> finite_values(ElementFormat f) {
  std::set<double> values;
  for (int code = 0; code < (1 << element_format_info(f).bits); ++code) {
    const float v = decode(f, uint8_t(code));
    if (std::isfinite(v)) values.insert(v);
  }
  return {values.begin(), values.end()};
}

struct Neighbours {
  double lo, hi;
};
// For |x| <= max: the largest value <= x and the smallest >= x.
Neighbours neighbours_of(const std::vector<double>& values, double x) {
  auto above = std::lower_bound(values.begin(), values.end(), x);
  if (*above == x) return {x, x};
  return {*(above - 1), *above};
}

TEST(StochasticRoundingTest, OnlyEverGivesOneOfTheTwoNeighbours) {
  Rng rng(11);
  for (ElementFormat f : kAllFormats) {
    const auto values = finite_values(f);
    const double max = values.back();
    std::vector<float> inputs;
    for (int i = 0; i < 3000; ++i) {
      // Log-uniform magnitudes from far below the smallest subnormal to past max.
      const float magnitude = float(max * std::exp2(-rng.uniform(-0.5f, 30.0f)));
      inputs.push_back(rng.uniform() < 0.5f ? -magnitude : magnitude);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const double x = inputs[i];
      const double clipped = std::clamp(x, -max, max);  // saturating: clip, then round
      const auto [lo, hi] = neighbours_of(values, clipped);
      std::set<double> seen;
      for (uint64_t draw = 0; draw < 64; ++draw) {
        const uint8_t code =
            encode_stochastic(f, float(x), Saturation::saturating, philox_bits64(3, i, draw));
        const double v = decode(f, code);
        ASSERT_TRUE(v == lo || v == hi) << element_format_name(f) << ": " << x << " -> " << v
                                        << ", neighbours " << lo << " and " << hi;
        seen.insert(v);
      }
      // Both neighbours turn up when each has probability >= 1/8 (64 draws: a miss
      // has probability 0.875^64 = 2e-4 per input at worst).
      const double p_up = (clipped - lo) / (hi - lo);
      if (lo != hi && p_up > 0.125 && p_up < 0.875)
        EXPECT_EQ(seen.size(), 2u) << element_format_name(f) << " x=" << x;
    }
  }
}

TEST(StochasticRoundingTest, RoundsUpBelowTheExactThreshold) {
  // x = 1 + 1/4 ulp in e4m3 (ulp 2^-3 at 1): up iff bits < 2^62.
  const float x = 1.0f + 0.25f * 0.125f;
  const auto e4m3 = ElementFormat::e4m3;
  const uint8_t one = 0x38, next = 0x39;
  const uint64_t threshold = uint64_t(1) << 62;
  EXPECT_EQ(encode_stochastic(e4m3, x, Saturation::saturating, threshold - 1), next);
  EXPECT_EQ(encode_stochastic(e4m3, x, Saturation::saturating, threshold), one);
  EXPECT_EQ(encode_stochastic(e4m3, x, Saturation::saturating, 0), next);
  EXPECT_EQ(encode_stochastic(e4m3, x, Saturation::saturating, ~uint64_t(0)), one);
  // Negative x rounds its magnitude: the same thresholds.
  EXPECT_EQ(encode_stochastic(e4m3, -x, Saturation::saturating, threshold - 1), next | 0x80);
  EXPECT_EQ(encode_stochastic(e4m3, -x, Saturation::saturating, threshold), one | 0x80);
  // In the subnormal range: 2^-9 * 0.75 rounds up to 2^-9 iff bits < 0.75 * 2^64.
  const float tiny = std::ldexp(0.75f, -9);
  const uint64_t three_quarters = 3 * (uint64_t(1) << 62);
  EXPECT_EQ(encode_stochastic(e4m3, tiny, Saturation::saturating, three_quarters - 1), 0x01);
  EXPECT_EQ(encode_stochastic(e4m3, tiny, Saturation::saturating, three_quarters), 0x00);
  // Far below the smallest subnormal the probability is kept to 64 bits after the point:
  // 2^-51 (x = 2^-60) still rounds up with bits 0; 2^-100 (x = 2^-109) truncates to 0.
  EXPECT_EQ(encode_stochastic(e4m3, std::ldexp(1.0f, -109), Saturation::saturating, 0), 0x00);
  EXPECT_EQ(encode_stochastic(e4m3, std::ldexp(1.0f, -60), Saturation::saturating, 0), 0x01);
}

TEST(StochasticRoundingTest, OverflowFollowsTheSaturationMode) {
  // 57344 + 1024 lies an eighth of the way from e5m2's max to 2^16 (its ulp there is 2^13),
  // which overflows.
  const float x = 57344.0f + 1024.0f;
  int inf = 0, max = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    const uint8_t code = encode_stochastic(ElementFormat::e5m2, x, Saturation::non_saturating,
                                           philox_bits64(1, 2, i));
    inf += code == 0x7c;
    max += code == 0x7b;
    EXPECT_EQ(
        encode_stochastic(ElementFormat::e5m2, x, Saturation::saturating, philox_bits64(1, 2, i)),
        0x7b);
    const uint8_t e4m3 = encode_stochastic(ElementFormat::e4m3, 456.0f, Saturation::non_saturating,
                                           philox_bits64(1, 2, i));
    EXPECT_TRUE(e4m3 == 0x7e || e4m3 == 0x7f);
  }
  EXPECT_EQ(inf + max, 4000);
  EXPECT_NEAR(inf / 4000.0, 0.125, 5 * std::sqrt(0.125 * 0.875 / 4000));
}

TEST(StochasticRoundingTest, IsUnbiased) {
  // The mean of N draws of SR(x) estimates x; its standard error is
  // (hi - lo) * sqrt(p (1 - p) / N) with p = (x - lo) / (hi - lo). We require 5 standard
  // errors (a chance of 6e-7 per case for an unbiased rounding; the draws are seeded, so the
  // test is deterministic), which a bias of 1% of p would fail at N = 2^18 for p near 1/2.
  constexpr size_t N = size_t(1) << 18;
  struct Case {
    ElementFormat f;
    float x;
  };
  const Case cases[] = {
      {ElementFormat::e4m3, 1.0f + 0.3f * 0.125f},  // a normal binade
      {ElementFormat::e4m3, -3.1f},                 // negative
      {ElementFormat::e4m3, std::ldexp(2.6f, -9)},  // subnormal
      {ElementFormat::e4m3, 440.0f},                // just below max
      {ElementFormat::e5m2, 0.7f},
      {ElementFormat::e5m2, std::ldexp(1.01f, -16)},  // near the smallest subnormal
      {ElementFormat::e2m3, 0.33f},
      {ElementFormat::e3m2, 21.5f},
      {ElementFormat::e2m1, 4.9f},  // between 4 and 6
      {ElementFormat::e2m1, 0.1f},  // between 0 and 0.5
  };
  std::vector<float> x(N);
  std::vector<uint8_t> codes(N);
  std::vector<float> decoded(N);
  for (size_t c = 0; c < std::size(cases); ++c) {
    const auto [f, value] = cases[c];
    const auto values = finite_values(f);
    const auto [lo, hi] = neighbours_of(values, std::abs(double(value)));
    ASSERT_LT(lo, hi);
    std::fill(x.begin(), x.end(), value);
    encode(f, x, codes, {.rounding = Rounding::stochastic, .seed = 2026, .stream = c});
    decode(f, codes, decoded);
    double sum = 0;
    size_t ups = 0;
    for (float d : decoded) {
      sum += d;
      ups += std::abs(double(d)) == hi;
    }
    const double p = (std::abs(double(value)) - lo) / (hi - lo);
    const double standard_error = (hi - lo) * std::sqrt(p * (1 - p) / N);
    EXPECT_NEAR(sum / N, double(value), 5 * standard_error)
        << element_format_name(f) << " x=" << value << " p=" << p;
    EXPECT_NEAR(double(ups) / N, p, 5 * std::sqrt(p * (1 - p) / N)) << element_format_name(f);
  }
}

TEST(StochasticRoundingTest, SameBitsOnAnyThreadCountAndInPieces) {
  Rng rng(5);
  std::vector<float> x(150000);  // past the parallel threshold
  for (auto& v : x) v = rng.normal() * std::exp2(float(int(rng.below(24)) - 12));
  const EncodeOptions options{.rounding = Rounding::stochastic,
                              .saturation = Saturation::non_saturating,
                              .seed = 42,
                              .stream = 9};
  for (ElementFormat f : kAllFormats) {
    SCOPED_TRACE(element_format_name(f));
    std::vector<uint8_t> one(x.size()), two(x.size()), three(x.size()), pieces(x.size());
    {
      ScopedOmpThreads t(1);
      encode(f, x, one, options);
    }
    {
      ScopedOmpThreads t(2);
      encode(f, x, two, options);
    }
    {
      ScopedOmpThreads t(3);
      encode(f, x, three, options);
    }
    EXPECT_EQ(one, two);
    EXPECT_EQ(one, three);
    // The per-element function with the documented bits.
    for (size_t i = 0; i < x.size(); i += 97)
      ASSERT_EQ(one[i], encode_stochastic(f, x[i], options.saturation,
                                          philox_bits64(options.seed, options.stream, i)));
    // In three pieces, each told where it starts.
    const size_t cut[] = {0, 1001, 70000, x.size()};
    for (int p = 0; p < 3; ++p) {
      EncodeOptions piece = options;
      piece.first_index = cut[p];
      encode(f, std::span<const float>(x).subspan(cut[p], cut[p + 1] - cut[p]),
             std::span<uint8_t>(pieces).subspan(cut[p], cut[p + 1] - cut[p]), piece);
    }
    EXPECT_EQ(one, pieces);
    // Another seed or stream rounds differently (some elements), the same seed identically.
    std::vector<uint8_t> again(x.size()), other_seed(x.size()), other_stream(x.size());
    encode(f, x, again, options);
    encode(f, x, other_seed,
           {.rounding = Rounding::stochastic,
            .saturation = Saturation::non_saturating,
            .seed = 43,
            .stream = 9});
    encode(f, x, other_stream,
           {.rounding = Rounding::stochastic,
            .saturation = Saturation::non_saturating,
            .seed = 42,
            .stream = 10});
    EXPECT_EQ(one, again);
    EXPECT_NE(one, other_seed);
    EXPECT_NE(one, other_stream);
  }
}

TEST(StochasticRoundingTest, Bf16InputsRoundAsTheirF32Values) {
  Rng rng(8);
  std::vector<uint16_t> b(50000);
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = uint16_t(rng.next_u64());
    f[i] = from_bits(uint32_t(b[i]) << 16);
  }
  const EncodeOptions options{.rounding = Rounding::stochastic, .seed = 1, .stream = 2};
  for (ElementFormat format : kAllFormats) {
    std::vector<uint8_t> from_bf16(b.size()), from_f32(b.size());
    encode_bf16(format, b, from_bf16, options);
    encode(format, f, from_f32, options);
    EXPECT_EQ(from_bf16, from_f32) << element_format_name(format);
  }
}

}  // namespace
}  // namespace campo
