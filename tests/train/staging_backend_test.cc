// Every host<->device boundary of training goes through a backend copy: the same runs as
// the loss pins (loss_pin_test.cc) on the test-only staging backend, whose tensors refuse
// host access, give bit-identical losses and weights to the CPU backend; evaluation,
// checkpoints and the weight copies of cost-aware do too.
#include <gtest/gtest.h>

#include <bit>
#include <filesystem>

#include "datasets/loader.h"
#include "datasets/synthetic.h"
#include "graph/checkpoint.h"
#include "tests/runtime/staging_backend.h"
#include "tests/train/loss_pin_util.h"

namespace campo {
namespace {

using testing::StagingBackend;

void expect_same_run(const std::string& config) {
  const PinRun cpu = run_pinned_config(config);
  auto staging = std::make_shared<StagingBackend>();
  const PinRun other = run_pinned_config(config, staging);
  ASSERT_EQ(cpu.losses.size(), other.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(cpu.losses[i]), std::bit_cast<uint32_t>(other.losses[i]))
        << config << " step " << i;
  EXPECT_EQ(cpu.weights_hash, other.weights_hash) << config;
  // Inputs went in and losses came out through the backend, step by step.
  EXPECT_GE(staging->to_device_copies, int64_t(cpu.losses.size()) * 2);
  EXPECT_GE(staging->to_host_copies, int64_t(cpu.losses.size()));
}

TEST(StagingBackendTest, LeNetFp32) { expect_same_run("lenet/fp32"); }
TEST(StagingBackendTest, LeNetAmp) { expect_same_run("lenet/amp"); }
TEST(StagingBackendTest, LeNetCostAwareWithWeightCopies) { expect_same_run("lenet/cost-aware"); }
TEST(StagingBackendTest, LeNetFp16LossScaleSkips) { expect_same_run("lenet/amp-fp16-dynamic"); }
TEST(StagingBackendTest, ResNet18Fp32) { expect_same_run("resnet18/fp32"); }
TEST(StagingBackendTest, ResNet18CostAware) { expect_same_run("resnet18/cost-aware"); }

TEST(StagingBackendTest, HostAccessToItsTensorsThrows) {
  StagingBackend backend;
  Tensor t = backend.zeros({4}, DType::f32);
  EXPECT_THROW(t.data_as<float>(), Error);
  EXPECT_THROW(t.to_float_vector(), Error);
  EXPECT_THROW(t.fill_zero(), Error);
  const Tensor host = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  backend.write(t, host);
  EXPECT_EQ(backend.to_host(t).to_float_vector(), std::vector<float>({1, 2, 3, 4}));
}

// Evaluation's argmax, a checkpoint written from the staging backend and read into a CPU
// session (and back): the same accuracy everywhere.
TEST(StagingBackendTest, EvaluationAndCheckpointsCrossTheBoundary) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_staging_backend.safetensors").string();
  ModelOptions mo;
  const Shape image = {1, 28, 28};
  SyntheticOptions so;
  so.size = 96;
  auto data = std::make_shared<SyntheticDataset>(so);
  auto train_and_eval = [&](std::shared_ptr<Backend> backend, double* accuracy) {
    TrainingSession s("lenet", mo, image, 32, {}, 5, std::move(backend));
    DataLoader loader(data, {.batch_size = 32, .shuffle = false});
    loader.start_epoch(0);
    Batch b;
    while (loader.next(b)) s.train_step(b, 0.05f);
    DataLoader eval(data, {.batch_size = 48, .shuffle = false});
    *accuracy = s.evaluate(eval);
    return hash_variables(s.variables());
  };
  double cpu_acc = 0, staging_acc = 0;
  const uint64_t cpu_hash = train_and_eval(default_cpu_backend(), &cpu_acc);
  auto staging = std::make_shared<StagingBackend>();
  const uint64_t staging_hash = train_and_eval(staging, &staging_acc);
  EXPECT_EQ(cpu_hash, staging_hash);
  EXPECT_EQ(cpu_acc, staging_acc);

  TrainingSession from("lenet", mo, image, 32, {}, 9, staging);
  from.save(path, 0, 0, "sgd");
  TrainingSession to("lenet", mo, image, 32, {}, 10, default_cpu_backend());
  to.restore(path, "sgd");
  EXPECT_EQ(hash_variables(from.variables()), hash_variables(to.variables()));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace campo
