// Dynamic loss scaling, as PyTorch's GradScaler: the loss (the gradient seed) is
// multiplied by `scale`; gradients are unscaled (x 1/scale) in f32 before the update.
// After a step whose gradients hold an inf or NaN, the update is skipped and the scale
// multiplied by backoff_factor; after growth_interval consecutive clean steps it is
// multiplied by growth_factor.
#pragma once

#include <cstdint>

namespace campo {

struct LossScalerOptions {
  bool enabled = true;
  float init_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& o = {});
  float scale() const { return scale_; }
  bool enabled() const { return options_.enabled; }
  // Records a step's outcome; returns whether its update should be applied.
  bool update(bool gradients_finite);
  int64_t skipped_steps() const { return skipped_; }
  int clean_steps() const { return clean_; }
  void set_state(float scale, int clean_steps, int64_t skipped);

 private:
  LossScalerOptions options_;
  float scale_;
  int clean_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace campo
