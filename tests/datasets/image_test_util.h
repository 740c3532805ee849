// Test helpers for the image data sets: locating an augmented crop inside its source.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace campo::testing {

struct FoundCrop {
  bool found = false;
  int64_t top = 0, left = 0;
  bool flip = false;
};

// Finds where `out` (C x S x S) lies in `ref` (C x H x W, the un-augmented normalised
// image) surrounded by `padding` pixels whose value is black[c]: a window at
// (top, left) in [-padding, H + padding - S] x [-padding, W + padding - S], mirrored
// or not. Exact up to `tol`.
inline FoundCrop find_crop(const std::vector<float>& ref, int64_t channels, int64_t height,
                           int64_t width, const std::vector<float>& out, int64_t side,
                           int64_t padding, const std::vector<float>& black, float tol = 1e-6f) {
  for (int flip = 0; flip < 2; ++flip)
    for (int64_t top = -padding; top <= height + padding - side; ++top)
      for (int64_t left = -padding; left <= width + padding - side; ++left) {
        bool match = true;
        for (int64_t c = 0; c < channels && match; ++c)
          for (int64_t y = 0; y < side && match; ++y)
            for (int64_t x = 0; x < side && match; ++x) {
              const int64_t sy = top + y, sx = left + (flip ? side - 1 - x : x);
              const bool inside = sy >= 0 && sy < height && sx >= 0 && sx < width;
              const float expected =
                  inside ? ref[size_t((c * height + sy) * width + sx)] : black[size_t(c)];
              match = std::fabs(out[size_t((c * side + y) * side + x)] - expected) <= tol;
            }
        if (match) return {true, top, left, flip != 0};
      }
  return {};
}

}  // namespace campo::testing
