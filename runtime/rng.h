// Seeded random numbers, so runs are reproducible: xoshiro256** seeded through splitmix64.
// The whole state can be saved and restored (checkpoints, --resume).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace campo {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : state_) {
      x += 0x9e3779b97f4a7c15ull;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
    has_spare_ = false;
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return float(next_u64() >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }
  // Standard normal (Box-Muller in double).
  float normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = (double(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = double(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = float(r * std::sin(2.0 * M_PI * u2));
    has_spare_ = true;
    return float(r * std::cos(2.0 * M_PI * u2));
  }
  float normal(float mean, float stddev) { return mean + stddev * normal(); }

  struct State {
    std::array<uint64_t, 4> s;
    bool has_spare;
    float spare;
  };
  State state() const { return {state_, has_spare_, spare_}; }
  void set_state(const State& st) {
    state_ = st.s;
    has_spare_ = st.has_spare;
    spare_ = st.spare;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> state_{};
  bool has_spare_ = false;
  float spare_ = 0;
};

}  // namespace campo
