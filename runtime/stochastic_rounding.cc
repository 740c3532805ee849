#include "runtime/stochastic_rounding.h"

namespace campo {

void f32_to_bf16_stochastic(const float* src, uint16_t* dst, size_t n, uint64_t seed,
                            uint64_t stream, uint64_t first_index) {
  size_t i = 0;
  while (i < n) {
    const uint64_t index = first_index + i;
    const uint64_t block = index >> 3;
    const auto words = philox4x32_10(
        {uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)},
        {uint32_t(seed), uint32_t(seed >> 32)});
    for (unsigned lane = unsigned(index & 7); lane < 8 && i < n; ++lane, ++i)
      dst[i] = f32_to_bf16_stochastic(src[i], uint16_t(words[lane >> 1] >> (16 * (lane & 1))));
  }
}

}  // namespace campo
