// Stochastic rounding of f32 to bf16, for weights and optimizer state stored in bf16 without
// f32 master copies (pure low-precision training, ops/cpu/optimizer.cc).
//
// bf16 is the upper half of f32, so the 16 low bits f of x's pattern are exactly where x lies
// between its two bf16 neighbours towards and away from zero, lo and hi: (|x| - |lo|) /
// (|hi| - |lo|) = f / 2^16, for normal and subnormal x alike. Adding 16 uniformly random bits
// r to the pattern and truncating rounds away from zero exactly when r >= 2^16 - f, that is
// with probability f / 2^16: E[rounded] = x, exactly (no approximation of the probability).
// Values already in bf16 (f = 0) never change. Above the largest finite bf16 the next grid
// point is 2^128, so a value there rounds up to inf with the probability above (as a
// non-saturating cast overflows); inf stays inf, NaN stays a quiet NaN of its sign.
//
// The random bits come from Philox (runtime/philox.h): one Philox block, 128 bits, serves the
// eight elements 8k .. 8k+7 of a stream, element i taking 16-bit lane i mod 8 of block
// floor(i / 8) under (seed, stream). A rounded array's bits are therefore a pure function of
// (seed, stream, element index): the same on any thread count or chunking.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "runtime/philox.h"

namespace campo {

// x rounded to bf16 stochastically with the 16 random bits `random16` (see above).
inline uint16_t f32_to_bf16_stochastic(float x, uint16_t random16) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  return uint16_t((u + random16) >> 16);
}

// The 16 random bits of element `index` of stream `stream` under `seed`.
inline uint16_t philox_bits16(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 3;
  const auto words = philox4x32_10(
      {uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)},
      {uint32_t(seed), uint32_t(seed >> 32)});
  const unsigned lane = unsigned(index & 7);
  return uint16_t(words[lane >> 1] >> (16 * (lane & 1)));
}

// dst[i] = f32_to_bf16_stochastic(src[i], philox_bits16(seed, stream, first_index + i)) for
// i in [0, n), one Philox block per eight elements, on the calling thread.
void f32_to_bf16_stochastic(const float* src, uint16_t* dst, size_t n, uint64_t seed,
                            uint64_t stream, uint64_t first_index);

}  // namespace campo
