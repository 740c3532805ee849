// MX block quantization (runtime/mx.h) against the OCP MX v1.0 scale rule with ml_dtypes
// element casts (tests/runtime/data/minifloat/mx.bin, from make_tables.py): zero blocks,
// NaN/inf blocks, huge and tiny amax, partial last blocks; stochastic rounding per block.
#include "runtime/mx.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "runtime/check.h"
#include "runtime/minifloat.h"
#include "runtime/rng.h"
#include "tests/runtime/minifloat_test_util.h"

namespace campo {
namespace {

TEST(MxTest, QuantizesAsTheSpecRuleWithMlDtypesElements) {
  const auto tensors = testing::read_mx_table();
  ASSERT_GT(tensors.size(), 300u);
  int nan_blocks = 0, zero_blocks = 0, clamped_blocks = 0, partial = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto& ref = tensors[t];
    SCOPED_TRACE(::testing::Message() << "tensor " << t << " (mx" << element_format_name(ref.format)
                                      << ", " << ref.inputs.size() << " values)");
    const size_t n = ref.inputs.size();
    partial += n % kMxBlockSize != 0;
    std::vector<uint8_t> scales(mx_block_count(n)), codes(n);
    mx_quantize(ref.format, ref.inputs, scales, codes);
    ASSERT_EQ(scales, ref.scales);
    ASSERT_EQ(codes, ref.codes);
    std::vector<float> out(n);
    mx_dequantize(ref.format, scales, codes, out);
    for (size_t i = 0; i < n; ++i) {
      const float expected = std::bit_cast<float>(ref.dequantized_bits[i]);
      if (std::isnan(expected))
        ASSERT_TRUE(std::isnan(out[i])) << "element " << i;
      else
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), ref.dequantized_bits[i])
            << "element " << i << ": " << out[i] << ", reference " << expected;
    }
    for (size_t b = 0; b < scales.size(); ++b) {
      nan_blocks += scales[b] == kE8M0Nan;
      clamped_blocks += scales[b] == 0;
      const size_t begin = b * kMxBlockSize;
      bool all_zero = true;
      for (size_t i = begin; i < std::min(n, begin + kMxBlockSize); ++i)
        all_zero = all_zero && ref.inputs[i] == 0.0f;
      zero_blocks += all_zero;
    }
  }
  // The table has the cases it is meant to (per format: 3 NaN/inf blocks, 2 zero blocks).
  EXPECT_EQ(nan_blocks, 15);
  EXPECT_GE(zero_blocks, 10);
  EXPECT_GT(clamped_blocks, zero_blocks);  // tiny amax clamped to 2^-127 too
  EXPECT_GE(partial, 25);
}

TEST(MxTest, SharedScaleRule) {
  const auto scale_of = [](ElementFormat f, std::vector<float> v) {
    return int(mx_shared_scale(f, v)) - 127;
  };
  // floor(log2(amax)) - emax_elem: e4m3 emax 8, e5m2 15, e2m3 2, e3m2 4, e2m1 2.
  EXPECT_EQ(scale_of(ElementFormat::e4m3, {448.0f, 1.0f}), 0);
  EXPECT_EQ(scale_of(ElementFormat::e4m3, {-511.0f, 1.0f}), 0);
  EXPECT_EQ(scale_of(ElementFormat::e4m3, {512.0f}), 1);
  EXPECT_EQ(scale_of(ElementFormat::e5m2, {1.0f}), -15);
  EXPECT_EQ(scale_of(ElementFormat::e2m1, {6.0f, -0.1f}), 0);
  EXPECT_EQ(scale_of(ElementFormat::e2m1, {8.0f}), 1);
  EXPECT_EQ(scale_of(ElementFormat::e3m2, {std::ldexp(1.0f, 127)}), 123);
  EXPECT_EQ(scale_of(ElementFormat::e2m3, {std::bit_cast<float>(1u)}), -127);  // clamped
  EXPECT_EQ(mx_shared_scale(ElementFormat::e2m3, std::vector<float>{0.0f, -0.0f}), 0);
  EXPECT_EQ(mx_shared_scale(ElementFormat::e4m3, std::vector<float>{1.0f, NAN}), kE8M0Nan);
  EXPECT_EQ(mx_shared_scale(ElementFormat::e4m3, std::vector<float>{-INFINITY}), kE8M0Nan);
  EXPECT_THROW(mx_shared_scale(ElementFormat::e4m3, std::span<const float>()), Error);
}

TEST(MxTest, ElementsSaturateAndNanBlocksDecodeAsNan) {
  // amax 511 in e4m3: scale 2^0, 511 clamps to 448 (not NaN); in a block with a NaN every
  // element decodes as NaN.
  std::vector<float> v(40, 1.0f);
  v[0] = 511.0f;
  v[35] = NAN;
  std::vector<uint8_t> scales(2), codes(40);
  mx_quantize(ElementFormat::e4m3, v, scales, codes);
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(codes[0], 0x7e);
  EXPECT_EQ(scales[1], kE8M0Nan);
  std::vector<float> out(40);
  mx_dequantize(ElementFormat::e4m3, scales, codes, out);
  EXPECT_EQ(out[0], 448.0f);
  EXPECT_EQ(out[1], 1.0f);
  for (size_t i = 32; i < 40; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
}

TEST(MxTest, SizesMustMatch) {
  std::vector<float> v(33), out(33);
  std::vector<uint8_t> one_scale(1), two_scales(2), codes(33), short_codes(32);
  EXPECT_THROW(mx_quantize(ElementFormat::e2m1, v, one_scale, codes), Error);
  EXPECT_THROW(mx_quantize(ElementFormat::e2m1, v, two_scales, short_codes), Error);
  EXPECT_THROW(mx_dequantize(ElementFormat::e2m1, one_scale, codes, out), Error);
  EXPECT_THROW(
      mx_dequantize(ElementFormat::e2m1, two_scales, codes, std::span<float>(out).first(3)), Error);
  mx_quantize(ElementFormat::e2m1, v, two_scales, codes);  // the right sizes
}

TEST(MxTest, StochasticRoundingKeepsTheScaleAndIsReproducibleOnAnyThreadCount) {
  Rng rng(3);
  std::vector<float> v(32 * 3000 + 7);  // past the parallel threshold, partial last block
  for (auto& x : v) x = rng.normal() * std::exp2(float(int(rng.below(40)) - 20));
  const MxOptions options{.rounding = Rounding::stochastic, .seed = 99, .stream = 4};
  const size_t blocks = mx_block_count(v.size());
  for (ElementFormat f : {ElementFormat::e4m3, ElementFormat::e5m2, ElementFormat::e2m3,
                          ElementFormat::e3m2, ElementFormat::e2m1}) {
    SCOPED_TRACE(element_format_name(f));
    std::vector<uint8_t> rne_scales(blocks), rne_codes(v.size());
    mx_quantize(f, v, rne_scales, rne_codes);
    std::vector<std::vector<uint8_t>> codes_by_threads;
    for (int threads : {1, 2, 3}) {
      testing::ScopedOmpThreads scoped(threads);
      std::vector<uint8_t> scales(blocks), codes(v.size());
      mx_quantize(f, v, scales, codes, options);
      EXPECT_EQ(scales, rne_scales);  // the scale does not depend on the rounding
      codes_by_threads.push_back(codes);
    }
    EXPECT_EQ(codes_by_threads[0], codes_by_threads[1]);
    EXPECT_EQ(codes_by_threads[0], codes_by_threads[2]);
    // Each stochastic element is RNE's or its neighbour on the scaled grid.
    std::vector<float> rne(v.size()), sr(v.size());
    mx_dequantize(f, rne_scales, rne_codes, rne);
    mx_dequantize(f, rne_scales, codes_by_threads[0], sr);
    size_t differ = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const bool between = (sr[i] - v[i]) * (rne[i] - v[i]) <= 0 || sr[i] == rne[i];
      ASSERT_TRUE(between) << "element " << i << ": " << v[i] << " -> " << sr[i] << " (RNE "
                           << rne[i] << ")";
      differ += sr[i] != rne[i];
    }
    // Stochastic rounding does round differently (not more often here: most elements are
    // far below their block's amax, where rounding up is rare).
    EXPECT_GT(differ, v.size() / 50);
    // Element i's random bits are those of index first_index + i: quantizing the blocks
    // from 64 on, told where they start, gives the same codes.
    MxOptions tail = options;
    tail.first_index = 64 * kMxBlockSize;
    const auto rest = std::span<const float>(v).subspan(tail.first_index);
    std::vector<uint8_t> tail_scales(mx_block_count(rest.size())), tail_codes(rest.size());
    mx_quantize(f, rest, tail_scales, tail_codes, tail);
    EXPECT_TRUE(std::equal(tail_codes.begin(), tail_codes.end(),
                           codes_by_threads[0].begin() + tail.first_index));
  }
}

}  // namespace
}  // namespace campo
