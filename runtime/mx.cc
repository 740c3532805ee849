#include "runtime/mx.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "runtime/check.h"
#include "runtime/chunked_for.h"
#include "runtime/philox.h"

namespace campo {

namespace {

constexpr int kE8M0Bias = 127;

void quantize_block(ElementFormat element, const float* src, size_t n, uint8_t* scale,
                    uint8_t* codes, const MxOptions& options, uint64_t first_index) {
  *scale = mx_shared_scale(element, {src, n});
  if (*scale == kE8M0Nan) {
    std::fill(codes, codes + n, uint8_t(0));
    return;
  }
  const int shared_exponent = int(*scale) - kE8M0Bias;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = options.rounding == Rounding::stochastic
                              ? philox_bits64(options.seed, options.stream, first_index + i)
                              : 0;
    codes[i] = encode_scaled(element, src[i], shared_exponent, Saturation::saturating,
                             options.rounding, bits);
  }
}

// Blocks per parallel task; the split does not change any bit (each block is independent).
constexpr size_t kBlocksPerTask = 256;
constexpr size_t kParallelBlocks = 1024;

}  // namespace

uint8_t mx_shared_scale(ElementFormat element, std::span<const float> block) {
  CAMPO_CHECK(!block.empty(), "mx_shared_scale: an empty block has no scale");
  uint32_t amax = 0;  // max |V_i| as bits: f32 magnitudes order as their bit patterns
  for (float v : block) {
    const uint32_t magnitude = std::bit_cast<uint32_t>(v) & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) return kE8M0Nan;  // an infinity or a NaN
    amax = std::max(amax, magnitude);
  }
  if (amax == 0) return 0;  // floor(log2 0) = -inf, clamped to -127
  const int shared = floor_log2_magnitude(amax) - element_format_info(element).emax;
  // Finite f32 gives shared <= 127 - emax; the clamp at the top is the spec's NaN for
  // scales E8M0 cannot hold, kept for any future wider input.
  if (shared > kE8M0Bias) return kE8M0Nan;
  return uint8_t(std::max(shared, -kE8M0Bias) + kE8M0Bias);
}

void mx_quantize(ElementFormat element, std::span<const float> src, std::span<uint8_t> scales,
                 std::span<uint8_t> codes, const MxOptions& options) {
  const size_t n = src.size();
  CAMPO_CHECK(codes.size() == n, "mx_quantize to mx", element_format_name(element), ": ", n,
              " inputs but room for ", codes.size(), " element codes");
  CAMPO_CHECK(scales.size() == mx_block_count(n), "mx_quantize to mx", element_format_name(element),
              ": ", n, " inputs make ", mx_block_count(n), " blocks of ", kMxBlockSize,
              " but room for ", scales.size(), " scales");
  for_each_chunk(mx_block_count(n), kParallelBlocks, kBlocksPerTask, [&](size_t first_block, size_t end_block) {
    for (size_t b = first_block; b < end_block; ++b) {
      const size_t begin = b * kMxBlockSize;
      const size_t size = std::min(kMxBlockSize, n - begin);
      quantize_block(element, src.data() + begin, size, &scales[b], codes.data() + begin, options,
                     options.first_index + begin);
    }
  });
}

void mx_dequantize(ElementFormat element, std::span<const uint8_t> scales,
                   std::span<const uint8_t> codes, std::span<float> dst) {
  const size_t n = codes.size();
  CAMPO_CHECK(dst.size() == n, "mx_dequantize from mx", element_format_name(element), ": ", n,
              " element codes but room for ", dst.size(), " values");
  CAMPO_CHECK(scales.size() == mx_block_count(n), "mx_dequantize from mx",
              element_format_name(element), ": ", n, " element codes make ", mx_block_count(n),
              " blocks but ", scales.size(), " scales were given");
  for_each_chunk(mx_block_count(n), kParallelBlocks, kBlocksPerTask, [&](size_t first_block, size_t end_block) {
    for (size_t b = first_block; b < end_block; ++b) {
      const size_t begin = b * kMxBlockSize;
      const size_t end = std::min(n, begin + kMxBlockSize);
      if (scales[b] == kE8M0Nan) {
        std::fill(dst.begin() + begin, dst.begin() + end, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      const int shared_exponent = int(scales[b]) - kE8M0Bias;
      for (size_t i = begin; i < end; ++i)
        dst[i] = std::ldexp(decode(element, codes[i]), shared_exponent);
    }
  });
}

}  // namespace campo
