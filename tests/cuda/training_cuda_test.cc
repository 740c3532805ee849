// Training on the GPU follows training on the CPU: the loss-pin runs (tests/train/
// loss_pin_util.h: LeNet and ResNet-18, deterministic batches) for 50 steps on the CUDA
// backend and on the CPU, losses compared step by step; and dynamic loss scaling's fault
// injection (an inf in the batch: no weight changes, the scale halves) on the GPU path.
// Each test skips, saying why, where there is no CUDA backend or no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/cuda/cuda_test_util.h"
#include "tests/train/loss_pin_util.h"

namespace campo {
namespace {

constexpr int kSteps = 50;

// The GPU sums in other orders than the CPU (cuDNN/cuBLASLt algorithms, CUB reductions),
// so losses drift apart by rounding that training then amplifies: f32 runs stay within
// 1e-3 relative over 50 steps; bf16 (8-bit mantissa) roundings differ wherever the sums
// do, so low-precision runs get 5e-2 relative.
void expect_gpu_follows_cpu(const std::string& config, double rtol) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const PinRun cpu = run_pinned_config(config, nullptr, kSteps);
  const PinRun cuda = run_pinned_config(config, gpu, kSteps);
  ASSERT_EQ(cpu.losses.size(), cuda.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    ASSERT_TRUE(std::isfinite(cuda.losses[i])) << config << " step " << i;
    EXPECT_NEAR(cuda.losses[i], cpu.losses[i], rtol * std::fabs(cpu.losses[i]) + 1e-4)
        << config << " step " << i;
  }
}

TEST(CudaTrainingTest, LeNetFp32FollowsCpu) { expect_gpu_follows_cpu("lenet/fp32", 1e-3); }
TEST(CudaTrainingTest, LeNetAmpFollowsCpu) { expect_gpu_follows_cpu("lenet/amp", 5e-2); }
TEST(CudaTrainingTest, LeNetFp16DynamicScalingFollowsCpu) {
  expect_gpu_follows_cpu("lenet/amp-fp16-dynamic", 5e-2);
}
TEST(CudaTrainingTest, LeNetCostAwareFollowsCpu) {
  expect_gpu_follows_cpu("lenet/cost-aware", 5e-2);
}
TEST(CudaTrainingTest, ResNet18Fp32FollowsCpu) { expect_gpu_follows_cpu("resnet18/fp32", 1e-3); }
TEST(CudaTrainingTest, ResNet18AmpFollowsCpu) { expect_gpu_follows_cpu("resnet18/amp", 5e-2); }

// CUDA graphs: a captured and replayed step runs the same kernels on the same addresses as
// the launched one, so the losses and weights are the same bits.
TEST(CudaTrainingTest, GraphReplayEqualsLaunchedSteps) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const std::string config : {"lenet/fp32", "lenet/amp-fp16-dynamic", "resnet18/amp"}) {
    gpu->set_cuda_graph(CudaGraphMode::off);
    const PinRun launched = run_pinned_config(config, gpu, 10);
    gpu->set_cuda_graph(CudaGraphMode::on);
    const PinRun replayed = run_pinned_config(config, gpu, 10);
    EXPECT_EQ(launched.replays, 0) << config;
    EXPECT_EQ(replayed.replays, 9) << config;  // the first step warms up
    EXPECT_EQ(replayed.losses, launched.losses) << config;
    EXPECT_EQ(replayed.weights_hash, launched.weights_hash) << config;
  }
  gpu->set_cuda_graph(CudaGraphMode::automatic);
}

// The input prefetch (train/prefetch.h): the next batch uploaded on the second stream during
// a step and landed at the next gives the losses and weights of batches copied at each step,
// launched and replayed.
TEST(CudaTrainingTest, PrefetchedStepsEqualFedSteps) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const CudaGraphMode mode : {CudaGraphMode::off, CudaGraphMode::on}) {
    gpu->set_cuda_graph(mode);
    for (const std::string config : {"lenet/fp32", "resnet18/amp"}) {
      const PinRun fed = run_pinned_config(config, gpu, 10);
      const PinRun ahead = run_pinned_config(config, gpu, 10, /*read_ahead=*/true);
      EXPECT_EQ(ahead.prefetched, 9) << config;
      EXPECT_EQ(ahead.losses, fed.losses) << config;
      EXPECT_EQ(ahead.weights_hash, fed.weights_hash) << config;
    }
  }
  gpu->set_cuda_graph(CudaGraphMode::automatic);
}

TEST(CudaTrainingTest, OverflowSkipsTheUpdateAndHalvesTheScale) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  PrecisionConfig p;
  p.policy = Precision::amp;
  p.low = DType::f16;
  p.scaler = LossScalerOptions{.enabled = true, .init_scale = 1024.0f, .growth_interval = 3};
  TrainingSession session("mlp", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7, gpu, p);
  Rng rng(1);
  auto make_batch = [&] { return random_batch(rng, 8, {1, 28, 28}); };
  session.train_step(make_batch(), 0.01f);  // non-zero momentum state
  const float scale = session.scaler().scale();
  const uint64_t before = hash_variables(session.variables());

  Batch bad = make_batch();
  bad.images.data_as<float>()[5] = std::numeric_limits<float>::infinity();
  session.train_step(bad, 0.01f);
  EXPECT_EQ(session.scaler().skipped_steps(), 1);
  EXPECT_EQ(session.scaler().scale(), scale * 0.5f);
  EXPECT_EQ(hash_variables(session.variables()), before) << "a skipped step changed a weight";
}

}  // namespace
}  // namespace campo
