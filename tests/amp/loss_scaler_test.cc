// Dynamic loss scaling: the state machine (fault injection through a real training step is
// in tests/train/loss_scaler_step_test.cc).
#include "amp/loss_scaler.h"

#include <gtest/gtest.h>

#include "runtime/check.h"

namespace campo {
namespace {

TEST(LossScalerTest, GradScalerDefaults) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
  for (int i = 0; i < 1999; ++i) EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_TRUE(s.update(true));  // the 2000th clean step in a row
  EXPECT_EQ(s.scale(), 65536.0f);
}

TEST(LossScalerTest, DisabledScalerKeepsScaleOne) {
  LossScaler s(LossScalerOptions{.enabled = false});
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0f);
}

TEST(LossScalerTest, RejectsImpossibleOptions) {
  EXPECT_THROW(LossScaler(LossScalerOptions{.init_scale = 0}), Error);
  EXPECT_THROW(LossScaler(LossScalerOptions{.backoff_factor = 1.5f}), Error);
  EXPECT_THROW(LossScaler(LossScalerOptions{.growth_interval = 0}), Error);
}

}  // namespace
}  // namespace campo
