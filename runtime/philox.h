// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011), the generator of Random123, cuRAND, JAX and
// PyTorch's CUDA kernels. A random word is a pure function of (key, counter): no state is
// carried from one draw to the next, so element i of a tensor gets the same bits whichever
// thread, chunk or device computes it. Stochastic rounding (runtime/minifloat.h) draws from it.
//
// Invariant: philox4x32_10 reproduces Random123's known-answer vectors
// (tests/runtime/minifloat_test.cc, PhiloxTest).
#pragma once

#include <array>
#include <cstdint>

namespace campo {

// Ten rounds of the Philox-4x32 bijection of `counter` under `key`.
inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                             std::array<uint32_t, 2> key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t product0 = uint64_t(kMultiplier0) * counter[0];
    const uint64_t product1 = uint64_t(kMultiplier1) * counter[2];
    counter = {uint32_t(product1 >> 32) ^ counter[1] ^ key[0], uint32_t(product1),
               uint32_t(product0 >> 32) ^ counter[3] ^ key[1], uint32_t(product0)};
  }
  return counter;
}

// 64 random bits for element `index` of stream `stream` under `seed`. One Philox block (128
// bits) serves the two elements 2k and 2k+1: counter = (k, stream), key = seed.
inline uint64_t philox_bits64(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 1;
  const auto words = philox4x32_10(
      {uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)},
      {uint32_t(seed), uint32_t(seed >> 32)});
  const int half = int(index & 1) * 2;
  return (uint64_t(words[half + 1]) << 32) | words[half];
}

}  // namespace campo
