#include "amp/loss_scaler.h"

#include <algorithm>

#include "runtime/check.h"

namespace campo {

namespace {

// The scale stays a normal f32 number whose reciprocal (the unscale factor) is one too, the
// range a checkpoint's scale is read in (train/trainer.cc): halving never reaches 0 (from
// which no growth comes back, and 1/0 turns every gradient into inf or NaN, so every later
// step is skipped) and doubling never reaches inf (which backs off to inf again).
constexpr float kMinScale = 0x1p-126f, kMaxScale = 0x1p126f;

}  // namespace

LossScaler::LossScaler(const LossScalerOptions& o)
    : options_(o), scale_(o.enabled ? o.init_scale : 1.0f) {
  CAMPO_CHECK(o.init_scale >= kMinScale && o.init_scale <= kMaxScale,
              "initial loss scale must be in [2^-126, 2^126] (a normal f32 number whose "
              "reciprocal is one too), got ",
              o.init_scale);
  CAMPO_CHECK(o.growth_factor >= 1, "loss-scale growth factor must be >= 1, got ", o.growth_factor);
  CAMPO_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1,
              "loss-scale backoff factor must be in (0, 1), got ", o.backoff_factor);
  CAMPO_CHECK(o.growth_interval > 0, "loss-scale growth interval must be positive, got ",
              o.growth_interval);
}

bool LossScaler::update(bool finite) {
  if (!options_.enabled) return finite;
  if (!finite) {
    scale_ = std::max(scale_ * options_.backoff_factor, kMinScale);
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ >= options_.growth_interval) {
    scale_ = std::min(scale_ * options_.growth_factor, kMaxScale);
    clean_ = 0;
  }
  return true;
}

void LossScaler::set_state(float scale, int clean_steps, int64_t skipped) {
  scale_ = scale;
  clean_ = clean_steps;
  skipped_ = skipped;
}

}  // namespace campo
