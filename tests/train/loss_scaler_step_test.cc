// Dynamic loss scaling through a real training step: an overflowing step changes no weight
// and no optimizer state, bit for bit, and halves the scale (fault injection).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "amp/loss_scaler.h"
#include "train/trainer.h"

namespace campo {
namespace {

std::vector<std::vector<char>> snapshot(VariableStore& vars) {
  std::vector<std::vector<char>> out;
  for (const auto& name : vars.names()) {
    const Tensor& t = vars.at(name);
    const char* p = static_cast<const char*>(t.data());
    out.emplace_back(p, p + t.nbytes());
  }
  return out;
}

Batch make_batch(int64_t n, Rng& rng) {
  Batch b;
  b.images = Tensor::empty({n, 1, 28, 28}, DType::f32);
  b.labels = Tensor::empty({n}, DType::i32);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data_as<float>()[i] = rng.normal();
  for (int64_t i = 0; i < n; ++i) b.labels.data_as<int32_t>()[i] = int32_t(rng.below(10));
  return b;
}

TEST(LossScalerTest, OverflowSkipsTheUpdateAndHalvesTheScale) {
  PrecisionConfig p;
  p.policy = Precision::amp;
  p.low = DType::f16;
  p.scaler = LossScalerOptions{.enabled = true, .init_scale = 1024.0f, .growth_interval = 3};
  OptimizerConfig opt;  // SGD with momentum: momentum buffers are optimizer state
  TrainingSession session("mlp", ModelOptions{}, {1, 28, 28}, 8, opt, 7, default_cpu_backend(), p);
  Rng rng(1);
  Batch good = make_batch(8, rng);
  session.train_step(good, 0.01f);  // creates non-zero momentum state
  ASSERT_EQ(session.scaler().skipped_steps(), 0);
  const float scale = session.scaler().scale();
  const int64_t step = session.step();

  Batch bad = make_batch(8, rng);
  bad.images.data_as<float>()[5] = std::numeric_limits<float>::infinity();
  auto before = snapshot(session.variables());
  session.train_step(bad, 0.01f);
  EXPECT_EQ(session.scaler().skipped_steps(), 1);
  EXPECT_EQ(session.scaler().scale(), scale * 0.5f);
  EXPECT_EQ(session.step(), step) << "a skipped step does not count";
  auto after = snapshot(session.variables());
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(before[i] == after[i]) << session.variables().names()[i] << " changed";

  // Three clean steps in a row double the scale again.
  for (int i = 0; i < 3; ++i) session.train_step(good, 0.01f);
  EXPECT_EQ(session.scaler().scale(), scale);
  EXPECT_EQ(session.scaler().skipped_steps(), 1);
}

}  // namespace
}  // namespace campo
