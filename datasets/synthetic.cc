#include "datasets/synthetic.h"

#include <algorithm>
#include <cmath>

#include "runtime/hash.h"
#include "runtime/rng.h"

namespace campo {
namespace {

// Bilinear upsampling (align_corners=True) of a gh x gw grid to h x w.
void upsample(const float* grid, int64_t gh, int64_t gw, float* out, int64_t h, int64_t w) {
  for (int64_t y = 0; y < h; ++y) {
    double sy = h > 1 ? double(y) * double(gh - 1) / double(h - 1) : 0.0;
    int64_t y0 = std::min<int64_t>(int64_t(sy), gh - 1), y1 = std::min<int64_t>(y0 + 1, gh - 1);
    float wy = float(sy - double(y0));
    for (int64_t x = 0; x < w; ++x) {
      double sx = w > 1 ? double(x) * double(gw - 1) / double(w - 1) : 0.0;
      int64_t x0 = std::min<int64_t>(int64_t(sx), gw - 1), x1 = std::min<int64_t>(x0 + 1, gw - 1);
      float wx = float(sx - double(x0));
      float top = (1 - wx) * grid[y0 * gw + x0] + wx * grid[y0 * gw + x1];
      float bottom = (1 - wx) * grid[y1 * gw + x0] + wx * grid[y1 * gw + x1];
      out[y * w + x] = (1 - wy) * top + wy * bottom;
    }
  }
}

}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b) { return splitmix64(splitmix64(a) ^ b); }

SyntheticDataset::SyntheticDataset(const SyntheticOptions& options) : options_(options) {
  const Shape& s = options.image_shape;
  CAMPO_CHECK(s.size() == 3 && s[0] > 0 && s[1] > 0 && s[2] > 0, options.name,
              ": image shape must be [C, H, W] with positive sizes, got ", shape_str(s));
  CAMPO_CHECK(options.size >= 0, options.name, ": size must be >= 0, got ", options.size);
  CAMPO_CHECK(options.num_classes > 0, options.name, ": num_classes must be positive, got ",
              options.num_classes);
  CAMPO_CHECK(std::isfinite(options.noise) && options.noise >= 0, options.name,
              ": noise must be >= 0, got ", options.noise);
  stream_seed_ = mix_seed(mix_seed(options.seed, 0x5a4d), options.stream + 1);

  const int64_t c = s[0], h = s[1], w = s[2];
  const int64_t gh = std::max<int64_t>(1, (h + 3) / 4), gw = std::max<int64_t>(1, (w + 3) / 4);
  prototypes_.resize(size_t(options.num_classes * c * h * w));
  std::vector<float> grid(size_t(gh * gw));
  Rng rng(mix_seed(options.seed, 0x9707));
  for (int64_t plane = 0; plane < options.num_classes * c; ++plane) {
    for (float& g : grid) g = rng.normal();
    upsample(grid.data(), gh, gw, prototypes_.data() + plane * h * w, h, w);
  }
}

int32_t SyntheticDataset::label_of(int64_t index) const {
  check_index(index);
  return int32_t(mix_seed(stream_seed_, uint64_t(index)) % uint64_t(options_.num_classes));
}

void SyntheticDataset::get(int64_t index, float* image, int32_t* label) const {
  const int32_t cls = label_of(index);
  const float* proto = prototype(cls);
  const int64_t n = image_numel();
  Rng rng(mix_seed(stream_seed_ ^ 0xa5a5a5a5ull, uint64_t(index)));
  const float noise = options_.noise;
  for (int64_t i = 0; i < n; ++i) image[i] = proto[i] + noise * rng.normal();
  *label = cls;
}

}  // namespace campo
