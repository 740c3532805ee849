// OCP Microscaling (MX v1.0) block formats: MXFP8 (e4m3 or e5m2 elements), MXFP6 (e2m3,
// e3m2) and MXFP4 (e2m1). A block of 32 consecutive values shares one E8M0 scale X = 2^s;
// element i stores P_i, and decodes as X * P_i.
//
// Quantization (the spec's conversion, section 6.3):
//   s   = floor(log2(max_i |V_i|)) - emax_elem      (emax_elem: element_format_info().emax)
//   P_i = the element nearest V_i / X (ties to even, or stochastic), clamped to +-max normal
// Elements always saturate, as the spec's clamp says (e4m3/e5m2 overflow would otherwise give
// NaN/inf for values in (max normal, 2^(emax_elem+1))). Where the spec leaves a choice, the
// scale follows the microxcaling library that accompanies it:
// - s is clamped below to -127, the smallest E8M0 scale; an all-zero block (floor(log2 0) =
//   -inf) gets s = -127 and zero elements. For f32 inputs s never exceeds 127.
// - A block holding a NaN or an infinity gets the NaN scale (0xFF); by the spec every element
//   of such a block decodes as NaN, and campo writes its element codes as 0.
// - V_i / X is never rounded in f32: the element encoder shifts exponents exactly.
// The last block of an array may be partial (n not a multiple of 32): its scale is that of
// the values it has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/minifloat.h"

namespace campo {

inline constexpr size_t kMxBlockSize = 32;

inline size_t mx_block_count(size_t n) { return (n + kMxBlockSize - 1) / kMxBlockSize; }

struct MxOptions {
  Rounding rounding = Rounding::nearest_even;
  // Stochastic rounding: element i draws philox_bits64(seed, stream, first_index + i), as in
  // EncodeOptions (runtime/minifloat.h).
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t first_index = 0;
};

// The shared exponent s of one block (any size >= 1) by the rule above, as its E8M0 code
// s + 127 (or 0xFF).
uint8_t mx_shared_scale(ElementFormat element, std::span<const float> block);

// n = src.size() values -> mx_block_count(n) scales and n element codes (one per byte).
// Throws when the sizes do not match. Multithreaded for large n, same bits on any team.
void mx_quantize(ElementFormat element, std::span<const float> src, std::span<uint8_t> scales,
                 std::span<uint8_t> codes, const MxOptions& options = {});
// X * P_i, rounded to f32 (exact unless it overflows f32, which quantization never gives);
// NaN for every element of a NaN-scaled block.
void mx_dequantize(ElementFormat element, std::span<const uint8_t> scales,
                   std::span<const uint8_t> codes, std::span<float> dst);

}  // namespace campo
