// --resume continues a run exactly: on the CPU with a fixed seed, the resumed run's
// losses are bit-identical to the uninterrupted run's.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "tools/lib/trainer.h"

namespace campo {
namespace {

TrainOptions small_run(const std::string& optimizer) {
  TrainOptions o;
  o.model = "mlp";
  o.precision = "fp32";
  o.dataset = "synthetic";
  o.dropout = 0.2f;  // exercises the dropout RNG state
  o.epochs = 2;
  o.batch = 32;
  o.lr = 0.02f;
  o.lr_schedule = "constant";
  o.optimizer = optimizer;
  o.train_limit = 640;  // 20 steps per epoch
  o.test_limit = 64;
  o.progress = "none";
  return o;
}

void check_resume(const std::string& optimizer) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("campo_resume_" + optimizer + ".safetensors"))
          .string();
  std::ostringstream log;
  TrainResult full = train(small_run(optimizer), log, false);
  ASSERT_EQ(full.losses.size(), 40u);

  TrainOptions first = small_run(optimizer);
  first.max_steps = 27;  // stops in the middle of epoch 2
  first.save_path = path;
  TrainResult a = train(first, log, false);
  ASSERT_EQ(a.losses.size(), 27u);

  TrainOptions second = small_run(optimizer);
  second.resume_path = path;
  TrainResult b = train(second, log, false);
  ASSERT_EQ(b.losses.size(), 13u) << log.str();
  for (size_t i = 0; i < 27; ++i) EXPECT_EQ(a.losses[i], full.losses[i]) << "step " << i;
  for (size_t i = 0; i < 13; ++i)
    EXPECT_EQ(b.losses[i], full.losses[27 + i]) << "resumed step " << 27 + i;
  EXPECT_EQ(b.test_accuracy, full.test_accuracy);
  std::filesystem::remove(path);
}

TEST(ResumeTest, SgdMomentumReproducesTheUninterruptedRun) { check_resume("sgd"); }
TEST(ResumeTest, AdamReproducesTheUninterruptedRun) { check_resume("adam"); }

TEST(ResumeTest, EvalReadsTheCheckpoint) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_eval_test.safetensors").string();
  TrainOptions o = small_run("sgd");
  o.epochs = 1;
  o.save_path = path;
  std::ostringstream log;
  TrainResult r = train(o, log, false);
  EvalOptions e;
  e.checkpoint = path;
  e.dataset = "synthetic";
  e.limit = 64;
  std::ostringstream out;
  double acc = evaluate_checkpoint(e, out);
  EXPECT_DOUBLE_EQ(acc, r.test_accuracy) << out.str();
  EXPECT_NE(out.str().find("\"event\":\"eval\""), std::string::npos);
  std::filesystem::remove(path);
}

TEST(ResumeTest, WrongModelIsRefused) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_wrong_model.safetensors").string();
  TrainOptions o = small_run("sgd");
  o.epochs = 1;
  o.save_path = path;
  std::ostringstream log;
  train(o, log, false);
  TrainOptions other = small_run("sgd");
  other.model = "lenet";
  other.resume_path = path;
  EXPECT_THROW(train(other, log, false), Error);
  std::filesystem::remove(path);
}

// Cost-aware with weight copies: a checkpoint restored into a fresh session continues
// bit-identically, because the restore's writes make the executable rebuild the copies
// from the restored weights (without that they would hold the fresh session's initial
// weights, which differ from the checkpoint's after three steps). Steady-state steps do
// not rebuild them.
TEST(ResumeTest, CostAwareWeightCopiesFollowARestore) {
  PrecisionConfig p;
  p.policy = Precision::cost_aware;
  auto costs = std::make_shared<CostTable>();
  costs->nodes.assign(10000, NodeCost{1.0, 0.5});  // low precision pays everywhere
  costs->cast = CastCostModel{1e-4, 1e-8};
  p.costs = costs;
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_resume_copies.safetensors").string();
  Rng rng(3);
  std::vector<Batch> batches;
  for (int i = 0; i < 5; ++i) {
    Batch b;
    b.images = Tensor::empty({8, 1, 28, 28}, DType::f32);
    b.labels = Tensor::empty({8}, DType::i32);
    for (int64_t k = 0; k < b.images.numel(); ++k) b.images.data_as<float>()[k] = rng.normal();
    for (int64_t k = 0; k < 8; ++k) b.labels.data_as<int32_t>()[k] = int32_t(rng.below(10));
    batches.push_back(b);
  }
  TrainingSession a("lenet", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7, p);
  ASSERT_GT(a.precision_summary().casts.weight_copies, 0);
  for (int i = 0; i < 3; ++i) a.train_step(batches[size_t(i)], 0.1f);
  EXPECT_EQ(a.train_executable().weight_copy_refreshes(), 1);
  a.save(path, 0, 3, "sgd");
  std::vector<float> continued;
  for (int i = 3; i < 5; ++i) continued.push_back(a.train_step(batches[size_t(i)], 0.1f));

  TrainingSession b("lenet", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7, p);
  b.train_step(batches[0], 0.1f);  // builds b's copies from its own weights first
  b.restore(path, "sgd");
  for (int i = 3; i < 5; ++i)
    EXPECT_EQ(b.train_step(batches[size_t(i)], 0.1f), continued[size_t(i - 3)]) << "step " << i;
  EXPECT_EQ(b.train_executable().weight_copy_refreshes(), 2);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace campo
