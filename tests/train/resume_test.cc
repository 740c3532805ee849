// --resume continues a run exactly: on the CPU with a fixed seed, the resumed run's
// losses are bit-identical to the uninterrupted run's. A checkpoint is a torchvision
// state_dict plus "optimizer." state; a checkpoint whose metadata or weights cannot be
// right (bad numbers, a position outside the run, NaN weights, a FIFO) is refused with a
// message naming the file and the field.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "graph/builder.h"
#include "graph/checkpoint.h"
#include "models/models.h"
#include "train/trainer.h"

namespace campo {
namespace {

TrainOptions small_run(const std::string& optimizer) {
  TrainOptions o;
  o.model = "mlp";
  o.precision = Precision::fp32;
  o.dataset = "synthetic";
  o.dropout = 0.2f;  // exercises the dropout RNG state
  o.epochs = 2;
  o.batch = 32;
  o.lr = 0.02f;
  o.schedule.kind = LrSchedule::Kind::constant;
  o.optimizer = parse_optimizer(optimizer);
  o.train_limit = 640;  // 20 steps per epoch
  o.test_limit = 64;
  o.report.progress = Progress::none;
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
  first.checkpoint.save_path = path;
  TrainResult a = train(first, log, false);
  ASSERT_EQ(a.losses.size(), 27u);

  TrainOptions second = small_run(optimizer);
  second.checkpoint.resume_path = path;
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

// With fp16 and a loss scale so large that the first steps overflow, the loss scaler skips
// their updates: the resumed run still counts the skipped batches as consumed, so its
// learning-rate schedule and --steps continue where the first run stopped and it
// reproduces the uninterrupted run.
TEST(ResumeTest, SkippedLossScaleStepsCountAsConsumedBatches) {
  auto run = [] {
    TrainOptions o = small_run("sgd");
    o.precision = Precision::amp;
    o.mixed.low_precision = "fp16";
    o.mixed.loss_scale = "dynamic";
    o.mixed.loss_scale_init = 0x1p40f;         // overflows fp16 gradients: about 25 skipped steps
    o.schedule.kind = LrSchedule::Kind::step;  // the learning rate halves each epoch of batches
    o.schedule.step_epochs = 1;
    o.schedule.gamma = 0.5f;
    return o;
  };
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_resume_skipped.safetensors").string();
  std::ostringstream log;
  TrainResult full = train(run(), log, false);
  ASSERT_EQ(full.losses.size(), 40u);
  TrainOptions first = run();
  first.max_steps = 27;
  first.checkpoint.save_path = path;
  train(first, log, false);
  ASSERT_GT(std::stoll(read_safetensors_metadata(path).at("loss_scale_skipped_steps")), 0);
  TrainOptions second = run();
  second.checkpoint.resume_path = path;
  TrainResult b = train(second, log, false);
  ASSERT_EQ(b.losses.size(), 13u) << log.str();
  for (size_t i = 0; i < 13; ++i)
    EXPECT_EQ(b.losses[i], full.losses[27 + i]) << "resumed step " << 27 + i;
  std::filesystem::remove(path);
}

TEST(ResumeTest, EvalReadsTheCheckpoint) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_eval_test.safetensors").string();
  TrainOptions o = small_run("sgd");
  o.epochs = 1;
  o.checkpoint.save_path = path;
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
  o.checkpoint.save_path = path;
  std::ostringstream log;
  train(o, log, false);
  TrainOptions other = small_run("sgd");
  other.model = "lenet";
  other.checkpoint.resume_path = path;
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
  TrainingSession a("lenet", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7,
                    default_cpu_backend(), p);
  ASSERT_GT(a.precision_summary().casts.weight_copies, 0);
  for (int i = 0; i < 3; ++i) a.train_step(batches[size_t(i)], 0.1f);
  EXPECT_EQ(a.train_executable().weight_copy_refreshes(), 1);
  a.save(path, 0, 3, "sgd");
  std::vector<float> continued;
  for (int i = 3; i < 5; ++i) continued.push_back(a.train_step(batches[size_t(i)], 0.1f));

  TrainingSession b("lenet", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7,
                    default_cpu_backend(), p);
  b.train_step(batches[0], 0.1f);  // builds b's copies from its own weights first
  b.restore(path, "sgd");
  for (int i = 3; i < 5; ++i)
    EXPECT_EQ(b.train_step(batches[size_t(i)], 0.1f), continued[size_t(i - 3)]) << "step " << i;
  EXPECT_EQ(b.train_executable().weight_copy_refreshes(), 2);
  std::filesystem::remove(path);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Rewrites the safetensors file at `path` with some metadata values replaced and `edit`
// applied to its tensors.
void rewrite_checkpoint(const std::string& path, const std::map<std::string, std::string>& md,
                        const std::function<void(std::map<std::string, Tensor>&)>& edit = {}) {
  auto metadata = read_safetensors_metadata(path);
  for (const auto& [k, v] : md) metadata[k] = v;
  auto tensors = read_safetensors(path);
  if (edit) edit(tensors);
  write_safetensors(path, {tensors.begin(), tensors.end()}, metadata);
}

// torchvision's resnet18().state_dict() names, in its order (module registration order:
// conv1, bn1, layer1..4 of two BasicBlocks each, fc).
std::vector<std::string> torchvision_resnet18_names() {
  std::vector<std::string> names;
  auto bn = [&](const std::string& p) {
    for (const char* s :
         {".weight", ".bias", ".running_mean", ".running_var", ".num_batches_tracked"})
      names.push_back(p + s);
  };
  names.push_back("conv1.weight");
  bn("bn1");
  for (int layer = 1; layer <= 4; ++layer)
    for (int block = 0; block < 2; ++block) {
      const std::string p = "layer" + std::to_string(layer) + "." + std::to_string(block) + ".";
      names.push_back(p + "conv1.weight");
      bn(p + "bn1");
      names.push_back(p + "conv2.weight");
      bn(p + "bn2");
      if (layer > 1 && block == 0) {
        names.push_back(p + "downsample.0.weight");
        bn(p + "downsample.1");
      }
    }
  names.push_back("fc.weight");
  names.push_back("fc.bias");
  return names;
}

// A PyTorch user loads the model part with load_state_dict(strict=True) after dropping the
// "optimizer." keys: the top level holds exactly torchvision's names, nothing more.
TEST(CheckpointNamesTest, ResNet18CheckpointIsATorchvisionStateDictPlusOptimizerState) {
  const std::string path = temp_path("campo_resnet18_names.safetensors");
  ModelOptions m;
  m.in_channels = 3;
  m.image_size = 32;
  TrainingSession session("resnet18", m, {3, 32, 32}, 2, OptimizerConfig{}, 0,
                          default_cpu_backend());
  session.save(path, 0, 0, "sgd");

  std::vector<std::string> model_names, optimizer_names;
  for (const std::string& n : checkpoint_tensor_names(path))
    (n.starts_with(kOptimizerStatePrefix) ? optimizer_names : model_names).push_back(n);
  std::vector<std::string> expected = torchvision_resnet18_names();
  ASSERT_EQ(expected.size(), 122u);
  EXPECT_EQ(model_names, expected);

  // The optimizer part: one momentum buffer per parameter, under "optimizer.".
  VariableStore vars(1, default_cpu_backend());
  Graph g;
  Builder b(g, vars);
  build_model("resnet18", b, b.placeholder("images", {2, 3, 32, 32}), m);
  std::vector<std::string> expected_state;
  for (const std::string& p : vars.names_of_kind(VariableKind::parameter)) {
    vars.get_or_create(p + ".momentum_buffer", vars.at(p).shape(), Init::zeros(),
                       VariableKind::optimizer_state);
    expected_state.push_back("optimizer." + p + ".momentum_buffer");
  }
  std::sort(optimizer_names.begin(), optimizer_names.end());
  std::sort(expected_state.begin(), expected_state.end());
  EXPECT_EQ(optimizer_names, expected_state);
  // campo itself loads it strictly: every tensor matches a variable.
  EXPECT_NO_THROW(load_checkpoint(path, vars, {.strict_unexpected = true}));
  std::filesystem::remove(path);
}

class ResumeRefusalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = temp_path("campo_resume_refusal_" + std::to_string(::getpid()) + ".safetensors");
    TrainOptions first = small_run("sgd");
    first.max_steps = 27;  // epoch 1 (0-based), batch 7 of 20
    first.checkpoint.save_path = path_;
    std::ostringstream log;
    train(first, log, false);
    std::ifstream in(path_, std::ios::binary);
    bytes_ = std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void TearDownTestSuite() { std::filesystem::remove(path_); }
  void SetUp() override { std::ofstream(path_, std::ios::binary) << bytes_; }
  // Resuming from the checkpoint fails with a message naming it and containing `expected`.
  void expect_resume_refused(const std::string& expected) {
    TrainOptions o = small_run("sgd");
    o.checkpoint.resume_path = path_;
    std::ostringstream log;
    const std::string msg = error_of([&] { train(o, log, false); });
    EXPECT_NE(msg.find("checkpoint " + path_), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
  static std::string path_, bytes_;
};
std::string ResumeRefusalTest::path_, ResumeRefusalTest::bytes_;

TEST_F(ResumeRefusalTest, BadLossScalerAndExecutorFields) {
  const std::string scale_range = "', not a finite number from 1.17549e-38 to 8.50706e+37";
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"loss_scale", "nan"}}, "metadata 'loss_scale' is 'nan" + scale_range},
      {{{"loss_scale", "inf"}}, "metadata 'loss_scale' is 'inf" + scale_range},
      {{{"loss_scale", "0"}}, "metadata 'loss_scale' is '0" + scale_range},
      {{{"loss_scale", "-1"}}, "metadata 'loss_scale' is '-1" + scale_range},
      {{{"loss_scale", "1e39"}}, "metadata 'loss_scale' is '1e39" + scale_range},
      {{{"loss_scale", "abc"}}, "metadata 'loss_scale' is 'abc" + scale_range},
      {{{"loss_scale", "2x"}}, "metadata 'loss_scale' is '2x" + scale_range},
      {{{"loss_scale_clean_steps", "-1"}},
       "metadata 'loss_scale_clean_steps' is '-1', not an integer from 0 to 2147483647"},
      {{{"loss_scale_clean_steps", "3000000000"}},
       "metadata 'loss_scale_clean_steps' is '3000000000'"},
      {{{"loss_scale_skipped_steps", "x"}}, "metadata 'loss_scale_skipped_steps' is 'x'"},
      {{{"executor_step", "1.5"}}, "metadata 'executor_step' is '1.5'"},
      {{{"campo.step", "-1"}}, "metadata 'campo.step' is '-1'"},
  };
  for (const auto& [md, expected] : cases) {
    SCOPED_TRACE(expected);
    SetUp();
    rewrite_checkpoint(path_, md);
    expect_resume_refused(expected);
  }
}

TEST_F(ResumeRefusalTest, PositionMustFitTheRun) {
  rewrite_checkpoint(path_, {{"campo.position_in_epoch", "21"}});
  expect_resume_refused(
      "campo.position_in_epoch is 21, beyond the 20 batches of an epoch of this run");
  SetUp();
  rewrite_checkpoint(path_, {{"campo.epoch", "2"}});
  expect_resume_refused("campo.epoch is 2 (batch 7), past the end of this run's --epochs 2");
  SetUp();
  rewrite_checkpoint(path_,
                     {{"campo.epoch", "9007199254740992"}, {"campo.position_in_epoch", "0"}});
  expect_resume_refused("campo.epoch is 9007199254740992 (batch 0), past the end");
  SetUp();
  rewrite_checkpoint(path_, {{"campo.step", "1000000"}});
  expect_resume_refused(
      "campo.step is 1000000, more than the 27 batches its position (epoch 1, "
      "batch 7) accounts for");
  SetUp();
  rewrite_checkpoint(path_, {{"campo.step", "20"}, {"loss_scale_skipped_steps", "8"}});
  expect_resume_refused("campo.step is 20 (+ 8 skipped), more than the 27 batches");
  // A finished run (epoch 2 of 2, batch 0) resumes to zero further steps.
  SetUp();
  rewrite_checkpoint(path_, {{"campo.epoch", "2"}, {"campo.position_in_epoch", "0"}});
  TrainOptions o = small_run("sgd");
  o.checkpoint.resume_path = path_;
  std::ostringstream log;
  EXPECT_EQ(train(o, log, false).losses.size(), 0u) << log.str();
}

TEST_F(ResumeRefusalTest, NonFiniteWeightsAreRefusedByResumeAndEval) {
  std::string tensor;
  rewrite_checkpoint(path_, {}, [&](std::map<std::string, Tensor>& tensors) {
    for (auto& [name, t] : tensors)
      if (t.dtype() == DType::f32 && !name.starts_with(kOptimizerStatePrefix) && t.numel() > 3) {
        t.data_as<float>()[3] = std::numeric_limits<float>::quiet_NaN();
        tensor = name;
        break;
      }
  });
  ASSERT_FALSE(tensor.empty());
  const std::string expected = "tensor '" + tensor + "' holds 1 NaN value(s) of ";
  expect_resume_refused(expected);
  EvalOptions e;
  e.checkpoint = path_;
  e.dataset = "synthetic";
  e.limit = 64;
  std::ostringstream out;
  const std::string msg = error_of([&] { evaluate_checkpoint(e, out); });
  EXPECT_NE(msg.find("checkpoint " + path_ + ": " + expected), std::string::npos) << msg;
  EXPECT_NE(msg.find("(the run that wrote it diverged)"), std::string::npos) << msg;
}

TEST(ResumeTest, FifoIsRefusedByResumeAndEval) {
  const std::string fifo = temp_path("campo_resume_fifo_" + std::to_string(::getpid()));
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Held open read-write so that a missing check fails this test instead of hanging it.
  const int holder = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(holder, 0);
  TrainOptions o = small_run("sgd");
  o.checkpoint.resume_path = fifo;
  std::ostringstream log;
  const std::string expected = "checkpoint " + fifo + " is a FIFO, not a regular file";
  EXPECT_NE(error_of([&] { train(o, log, false); }).find(expected), std::string::npos);
  EvalOptions e;
  e.checkpoint = fifo;
  e.dataset = "synthetic";
  EXPECT_NE(error_of([&] { evaluate_checkpoint(e, log); }).find(expected), std::string::npos);
  ::close(holder);
  std::filesystem::remove(fifo);
}

// The loss scale is stored exactly: a scale far below 1 (after many overflows) comes back
// as the same float, not rounded to six decimals ("0.000000").
TEST(ResumeTest, LossScaleRoundTripsExactly) {
  const std::string path = temp_path("campo_loss_scale.safetensors");
  PrecisionConfig p;
  p.scaler.enabled = true;
  p.scaler.init_scale = 0x1p-30f;
  TrainingSession a("mlp", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7,
                    default_cpu_backend(), p);
  a.save(path, 0, 0, "sgd");
  p.scaler.init_scale = 65536.0f;
  TrainingSession b("mlp", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7,
                    default_cpu_backend(), p);
  b.restore(path, "sgd");
  EXPECT_EQ(b.scaler().scale(), 0x1p-30f);
  std::filesystem::remove(path);
}

// A checkpoint of a run without dynamic scaling (fp32) carries no scale: a run resumed from
// it with fp16 and a dynamic scale starts from its own --loss-scale-init, not from 1.
TEST(ResumeTest, ARunWithoutDynamicScalingLeavesTheResumedRunsInitialScale) {
  const std::string path = temp_path("campo_fp32_to_fp16.safetensors");
  TrainingSession a("mlp", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7,
                    default_cpu_backend());
  a.save(path, 0, 0, "sgd");
  EXPECT_EQ(read_safetensors_metadata(path).count("loss_scale"), 0u);
  PrecisionConfig p;
  p.scaler.enabled = true;
  p.scaler.init_scale = 1024.0f;
  TrainingSession b("mlp", ModelOptions{}, {1, 28, 28}, 8, OptimizerConfig{}, 7,
                    default_cpu_backend(), p);
  b.restore(path, "sgd");
  EXPECT_EQ(b.scaler().scale(), 1024.0f);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace campo
