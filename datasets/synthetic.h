// A deterministic synthetic data set with learnable labels, generated on the fly.
//
// Each class c has a fixed prototype image P_c (smooth: N(0,1) values on a coarse grid,
// upsampled bilinearly), drawn from the seed alone. Sample i of a stream is
//   label_i = h(stream_seed, i) mod num_classes,   x_i = P_label + noise * N(0, 1)
// with the noise drawn from an Rng seeded by h(stream_seed, i). Nothing but the prototypes
// is stored, every sample is a pure function of (seed, stream, index), and train/test
// streams of one seed share the prototypes, so a model trained on one generalises to the
// other.
#pragma once

#include <cstdint>
#include <vector>

#include "datasets/dataset.h"

namespace campo {

struct SyntheticOptions {
  int64_t size = 1024;
  Shape image_shape = {1, 28, 28};  // [C, H, W]
  int num_classes = 10;
  uint64_t seed = 0;
  uint64_t stream = 0;  // 0 for train, 1 for test: other samples, same prototypes
  float noise = 0.5f;   // std of the per-pixel noise; prototypes have std ~1
  std::string name = "synthetic";
};

class SyntheticDataset final : public Dataset {
 public:
  explicit SyntheticDataset(const SyntheticOptions& options);

  int64_t size() const override { return options_.size; }
  Shape image_shape() const override { return options_.image_shape; }
  int num_classes() const override { return options_.num_classes; }
  std::string name() const override { return options_.name; }
  void get(int64_t index, float* image, int32_t* label) const override;

  int32_t label_of(int64_t index) const;
  const float* prototype(int cls) const { return prototypes_.data() + cls * image_numel(); }

 private:
  SyntheticOptions options_;
  uint64_t stream_seed_ = 0;
  std::vector<float> prototypes_;  // num_classes * C * H * W
};

// splitmix64 of (a, b): a well-mixed 64-bit hash for seeding per-item generators.
uint64_t mix_seed(uint64_t a, uint64_t b);

}  // namespace campo
