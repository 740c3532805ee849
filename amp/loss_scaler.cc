#include "amp/loss_scaler.h"

#include "runtime/check.h"

namespace campo {

LossScaler::LossScaler(const LossScalerOptions& o) : options_(o), scale_(o.enabled ? o.init_scale : 1.0f) {
  CAMPO_CHECK(o.init_scale > 0, "initial loss scale must be positive, got ", o.init_scale);
  CAMPO_CHECK(o.growth_factor >= 1, "loss-scale growth factor must be >= 1, got ", o.growth_factor);
  CAMPO_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1,
              "loss-scale backoff factor must be in (0, 1), got ", o.backoff_factor);
  CAMPO_CHECK(o.growth_interval > 0, "loss-scale growth interval must be positive, got ",
              o.growth_interval);
}

bool LossScaler::update(bool finite) {
  if (!options_.enabled) return finite;
  if (!finite) {
    scale_ *= options_.backoff_factor;
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
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
