// Model arrays (train/model_array.h): model i of an array trains as it would alone. Each
// array below is compared with N single sessions of the same hyperparameters fed the same
// batches: the starting weights bitwise, then every step's loss.
//
// Why not bitwise after the first step: the fused step sums in other orders than the single
// one in a few places. oneDNN's grouped convolutions split their weight-gradient reductions
// over the minibatch across threads by the whole problem's shape, and the per-model loss
// means reduce a [batch, N] tensor. A sum then differs by an f32 ulp now and then (LeNet:
// most steps are bit-identical; the first difference appears after a few steps), and
// training amplifies it: ReLU masks flip where a pre-activation cancels to ~1e-6, and batch
// norm at small batches amplifies every difference from step to step (ResNet-18 reaches
// O(1) relative loss differences after ~20 steps from a 1e-7 start; by step 2 it was 8e-5
// on one CI machine, whose oneDNN kernels split the sums differently from this one's). So
// every step must lie within 3x the envelope of a control, the single run restarted from
// its parameters times 1 + 1e-6 u (rounding-sized noise), plus 1e-4 relative. An array that
// mixes models up (a wrong slice, another model's learning rate, a shared gradient) is off
// by 1e-2 or more from the first update.
#include "train/model_array.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "datasets/loader.h"
#include "datasets/synthetic.h"
#include "graph/checkpoint.h"
#include "runtime/rng.h"
#include "tests/train/array_test_util.h"
#include "train/trainer.h"

namespace campo {
namespace {

struct ArrayCase {
  std::string model;
  Shape image;
  int64_t batch;
  int steps;
  double loss_rtol;  // the floor of the tolerance, relative (see the file comment)
  ArrayHyperparameters h;
};

ArrayHyperparameters three_models() {
  ArrayHyperparameters h;
  h.lr = {0.02f, 0.01f, 0.03f};
  h.momentum = {0.9f, 0.0f, 0.5f};
  h.weight_decay = {0.0f, 5e-4f, 1e-3f};
  h.dropout = {0, 0, 0};
  h.seed = {1, 7, 1234};
  return h;
}

ArrayHyperparameters two_models() {
  ArrayHyperparameters h;
  h.lr = {0.01f, 0.005f};
  h.momentum = {0.9f, 0.5f};
  h.weight_decay = {1e-4f, 0.0f};
  h.dropout = {0, 0};
  h.seed = {3, 4};
  return h;
}

ModelOptions options_for(const Shape& image) {
  ModelOptions m;
  m.in_channels = int(image[0]);
  m.image_size = int(image[1]);
  return m;
}

std::shared_ptr<const Dataset> data_for(const Shape& image, int64_t size, uint64_t stream = 0) {
  SyntheticOptions so;
  so.size = size;
  so.image_shape = image;
  so.stream = stream;
  return std::make_shared<SyntheticDataset>(so);
}

constexpr double kControlFactor = 3.0;

using testing::perturb_parameters;

void expect_trains_as_singles(const ArrayCase& c) {
  const int n = c.h.size();
  const ModelOptions mo = options_for(c.image);
  TrainingSession array(c.model, mo, c.image, c.batch, OptimizerConfig{}, c.h,
                        default_cpu_backend());
  // Each model alone, and alone from parameters perturbed by rounding-sized noise (the
  // control that calibrates how far float rounding alone moves a run).
  std::vector<std::unique_ptr<TrainingSession>> singles, controls;
  for (int i = 0; i < n; ++i) {
    OptimizerConfig oc;
    oc.momentum = c.h.momentum[size_t(i)];
    oc.weight_decay = c.h.weight_decay[size_t(i)];
    for (auto* list : {&singles, &controls})
      list->push_back(std::make_unique<TrainingSession>(
          c.model, mo, c.image, c.batch, oc, c.h.seed[size_t(i)], default_cpu_backend()));
    perturb_parameters(controls.back()->variables());
  }
  // The starting weights: exactly the single runs'.
  for (int i = 0; i < n; ++i)
    for (const std::string& name : singles[size_t(i)]->variables().names()) {
      const Tensor a = array.read_model_variable(i, name);
      const Tensor s = singles[size_t(i)]->variables().read(name);
      ASSERT_EQ(a.shape(), s.shape()) << name;
      ASSERT_EQ(a.to_float_vector(), s.to_float_vector()) << "model " << i << " " << name;
    }

  DataLoader loader(data_for(c.image, c.batch * c.steps),
                    {.batch_size = c.batch, .shuffle = false});
  loader.start_epoch(0);
  Batch b;
  int step = 0;
  std::vector<double> control_envelope(size_t(n), 0.0);
  while (loader.next(b)) {
    const std::vector<float> losses =
        array.train_step(std::vector<const Batch*>(size_t(n), &b), c.h.lr);
    for (int i = 0; i < n; ++i) {
      const double single = singles[size_t(i)]->train_step(b, c.h.lr[size_t(i)]);
      const double control = controls[size_t(i)]->train_step(b, c.h.lr[size_t(i)]);
      double& envelope = control_envelope[size_t(i)];
      envelope = std::max(envelope, std::abs(control - single) / std::abs(single));
      const double rel = std::abs(losses[size_t(i)] - single) / std::abs(single);
      if (getenv("CAMPO_ARRAY_DEBUG"))
        std::printf("step %d model %d array %.3g control %.3g\n", step, i, rel, envelope);
      // No further from the single run than 3x what rounding-sized noise moved its control.
      EXPECT_LE(rel, kControlFactor * envelope + c.loss_rtol)
          << c.model << " model " << i << " step " << step;
    }
    ++step;
  }
  EXPECT_EQ(step, c.steps);
}

TEST(ModelArrayTest, LeNetTrainsAsThreeSingleRuns) {
  expect_trains_as_singles({"lenet", {1, 28, 28}, 16, 50, 1e-4, three_models()});
}

TEST(ModelArrayTest, ResNet18TrainsAsTwoSingleRuns) {
  expect_trains_as_singles({"resnet18", {3, 16, 16}, 8, 50, 1e-4, two_models()});
}

TEST(ModelArrayTest, EachModelsCheckpointReadsAsASingleModel) {
  const Shape image = {1, 28, 28};
  const ArrayHyperparameters h = three_models();
  TrainingSession array("lenet", options_for(image), image, 8, OptimizerConfig{}, h,
                        default_cpu_backend());
  DataLoader loader(data_for(image, 16), {.batch_size = 8, .shuffle = false});
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) array.train_step(std::vector<const Batch*>(3, &b), h.lr);
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_model_array_1.safetensors").string();
  array.save_model(1, path, 0, 2, "sgd");
  // A single session of the same model reads it, parameters and momentum alike.
  TrainingSession single("lenet", options_for(image), image, 8, OptimizerConfig{}, 99,
                         default_cpu_backend());
  single.restore(path, "sgd");
  for (const std::string& name : single.variables().names())
    EXPECT_EQ(single.variables().read(name).to_float_vector(),
              array.read_model_variable(1, name).to_float_vector())
        << name;
  // Its accuracy is model 1's.
  DataLoader eval_a(data_for(image, 40, 1), {.batch_size = 20, .shuffle = false});
  DataLoader eval_s(data_for(image, 40, 1), {.batch_size = 20, .shuffle = false});
  EXPECT_EQ(array.evaluate_models(eval_a)[1], single.evaluate(eval_s));
  std::filesystem::remove(path);
}

TEST(ModelArrayTest, ModelsSeeTheirOwnBatches) {
  // Model 1 alone trained on batch B2 while model 0 trains on B1: each equals its single run,
  // so the stacking keeps every model's images and labels apart.
  const Shape image = {1, 28, 28};
  ArrayHyperparameters h = two_models();
  h.seed = {5, 5};
  h.lr = {0.05f, 0.05f};
  h.momentum = {0.9f, 0.9f};
  h.weight_decay = {0, 0};
  TrainingSession array("lenet", options_for(image), image, 8, OptimizerConfig{}, h,
                        default_cpu_backend());
  TrainingSession single("lenet", options_for(image), image, 8, OptimizerConfig{}, 5,
                         default_cpu_backend());
  DataLoader loader(data_for(image, 16), {.batch_size = 8, .shuffle = false});
  loader.start_epoch(0);
  Batch b1, b2;
  ASSERT_TRUE(loader.next(b1));
  ASSERT_TRUE(loader.next(b2));
  const std::vector<float> losses = array.train_step({&b1, &b2}, h.lr);
  TrainingSession single2("lenet", options_for(image), image, 8, OptimizerConfig{}, 5,
                          default_cpu_backend());
  const float l1 = single.train_step(b1, 0.05f);
  const float l2 = single2.train_step(b2, 0.05f);
  EXPECT_NE(l1, l2);
  EXPECT_NEAR(losses[0], l1, 1e-5 * std::abs(l1));
  EXPECT_NEAR(losses[1], l2, 1e-5 * std::abs(l2));
}

TEST(ModelArrayTest, UnsupportedModelsAreRefusedWithTheReason) {
  std::string why;
  EXPECT_FALSE(supports_model_array("inception_v3", &why));
  EXPECT_NE(why.find("concatenate channels"), std::string::npos) << why;
  EXPECT_FALSE(supports_model_array("bert", &why));
  EXPECT_TRUE(supports_model_array("resnet18"));
}

TEST(ModelArrayTest, CheckpointPathsPerModel) {
  EXPECT_EQ(array_checkpoint_path("run.safetensors", 2), "run-2.safetensors");
  EXPECT_EQ(array_checkpoint_path("out/run", 0), "out/run-0");
  EXPECT_EQ(array_checkpoint_path("a.b/run", 1), "a.b/run-1");
}

}  // namespace
}  // namespace campo
