// The input prefetch (train/prefetch.h) on --device cpu:strict, the device that takes a
// GPU's path through it without one: a session given each next batch uploads it during the
// step and lands it at the next, with the losses and weights of a session fed from the host;
// a step whose batch is not the one uploaded is fed from the host, the upload dropped.
#include <gtest/gtest.h>

#include "runtime/strict_backend.h"
#include "tests/train/loss_pin_util.h"

namespace campo {
namespace {

TEST(InputPrefetchTest, PrefetchedStepsEqualFedSteps) {
  for (const std::string config : {"lenet/fp32", "lenet/amp-fp16-dynamic"}) {
    auto strict = std::make_shared<StrictCpuBackend>();
    const PinRun fed = run_pinned_config(config, strict, 6);
    EXPECT_EQ(strict->uploads, 0);
    const PinRun ahead = run_pinned_config(config, strict, 6, /*read_ahead=*/true);
    EXPECT_EQ(fed.prefetched, 0) << config;
    EXPECT_EQ(ahead.prefetched, 5) << config;
    EXPECT_EQ(strict->uploads, 5 * 2) << config;  // images and labels of steps 2 to 6
    EXPECT_EQ(ahead.losses, fed.losses) << config;
    EXPECT_EQ(ahead.weights_hash, fed.weights_hash) << config;
  }
}

TEST(InputPrefetchTest, AnotherBatchThanTheUploadedOneIsFedFromTheHost) {
  auto strict = std::make_shared<StrictCpuBackend>();
  ModelOptions mo;
  mo.in_channels = 1;
  mo.image_size = 28;
  auto session = [&] {
    return std::make_unique<TrainingSession>("mlp", mo, Shape{1, 28, 28}, 8, OptimizerConfig{}, 7,
                                             strict);
  };
  Rng rng(3);
  const Batch a = random_batch(rng, 8, {1, 28, 28}), b = random_batch(rng, 8, {1, 28, 28}),
              c = random_batch(rng, 8, {1, 28, 28});
  auto with_surprise = session(), plain = session();
  // Uploads b, then trains on c: c's values, not b's.
  with_surprise->train_step({&a}, {0.1f}, {&b});
  const float surprised = with_surprise->train_step({&c}, {0.1f})[0];
  EXPECT_EQ(with_surprise->prefetched_steps(), 0);
  plain->train_step({&a}, {0.1f});
  EXPECT_EQ(surprised, plain->train_step({&c}, {0.1f})[0]);
  EXPECT_EQ(hash_variables(with_surprise->variables()), hash_variables(plain->variables()));
}

}  // namespace
}  // namespace campo
