// The host synchronizations of a training step, counted on --device cpu:strict
// (runtime/strict_backend.h: every call that would wait for a GPU's stream is counted as
// host_syncs; the calls a GPU issues in stream order are not). A step in the steady state,
// its batch uploaded during the step before (train/prefetch.h), waits exactly where
// docs/gpu.md says: reading the loss and, with dynamic loss scaling, the finite flag. The
// per-step scalars (learning rate, Adam's step, the loss scale and its inverse) are queued
// copies (Backend::queue_copy_from_host), not waits: fed with copy_from_host, as before,
// each step would wait four more times.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "amp/policy.h"
#include "tests/runtime/staging_backend.h"
#include "tests/train/loss_pin_util.h"

namespace campo {
namespace {

using testing::StagingBackend;

struct StepCounts {
  int64_t host_syncs = 0, queued_copies = 0, uploads = 0;
};

// Five steps of `session` on distinct batches, each passing the next batch for the
// prefetch; the counts of each step from the third on (the first is fed from the host, the
// second lands the first upload), all equal.
std::vector<StepCounts> steady_steps(TrainingSession& session, StagingBackend& backend, Rng& rng) {
  std::vector<Batch> batches;
  for (int i = 0; i < 6; ++i) batches.push_back(random_batch(rng, 8, {1, 28, 28}));
  std::vector<StepCounts> out;
  for (int i = 0; i < 5; ++i) {
    const StepCounts before{backend.host_syncs, backend.queued_copies, backend.uploads};
    session.train_step({&batches[size_t(i)]}, {0.01f}, {&batches[size_t(i) + 1]});
    if (i >= 2)
      out.push_back({backend.host_syncs - before.host_syncs,
                     backend.queued_copies - before.queued_copies,
                     backend.uploads - before.uploads});
  }
  return out;
}

TEST(StepSyncTest, AStepWaitsOnlyForItsLoss) {
  auto backend = std::make_shared<StagingBackend>();
  Rng rng(3);
  TrainingSession session("mlp", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7, backend);
  for (const StepCounts& c : steady_steps(session, *backend, rng)) {
    EXPECT_EQ(c.host_syncs, 1) << "the loss only";
    EXPECT_EQ(c.queued_copies, 1) << "the learning rate";
    EXPECT_EQ(c.uploads, 2) << "the next batch's images and labels";
  }
}

TEST(StepSyncTest, ADynamicallyScaledAdamStepWaitsForItsLossAndFiniteFlag) {
  auto backend = std::make_shared<StagingBackend>();
  Rng rng(3);
  PrecisionConfig p;
  p.policy = Precision::amp;
  p.low = DType::f16;
  p.scaler = LossScalerOptions{.enabled = true, .init_scale = 1024.0f, .growth_interval = 3};
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::adam;
  TrainingSession session("mlp", ModelOptions{}, {1, 28, 28}, 8, adam, 7, backend, p);
  for (const StepCounts& c : steady_steps(session, *backend, rng)) {
    EXPECT_EQ(c.host_syncs, 2) << "the loss and the finite flag only";
    EXPECT_EQ(c.queued_copies, 4) << "lr, step, loss_scale, inv_loss_scale";
    EXPECT_EQ(c.uploads, 2);
  }
}

}  // namespace
}  // namespace campo
