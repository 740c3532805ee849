// Small non-cryptographic hashes for keys and seeds: stable across runs, platforms and
// thread counts (they name cache files, agree ranks, and key random streams).
#pragma once

#include <cstdint>
#include <string_view>

namespace campo {

// 64-bit FNV-1a of `text`.
inline uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// SplitMix64's output for state x: x advanced by the golden-ratio increment, then mixed.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace campo
