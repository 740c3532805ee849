// DCGAN model arrays (train/gan_trainer.h): model i of an array of GANs trains as a single
// GanSession of its hyperparameters would. Each array below is compared with single
// sessions of the same seed, lr, weight decay (and sgd momentum) fed the same real batches:
// the starting weights bitwise, then every iteration's loss_D and loss_G.
//
// Why not bitwise after the first iteration: the fused graphs sum in other orders than the
// single ones in a few places (oneDNN's grouped convolutions split their weight-gradient
// reductions by the whole problem's shape; the per-model batch means reduce a [batch, N]
// tensor), so a sum differs by an f32 ulp now and then, and training amplifies it: batch
// norm at batch 8 amplifies every difference from step to step, leaky-ReLU slopes flip
// where a pre-activation cancels, and Adam turns gradients that are rounding noise (zero in
// exact arithmetic) into +-lr updates whatever their size (see tests/graph/layout_test.cc
// near kChangeFloor), so a GAN's two players drift apart from rounding alone faster than a
// classifier. So (as tests/train/model_array_test.cc):
//  - the first 3 iterations must agree within 1e-5 relative (rounding only, not yet
//    amplified);
//  - later iterations within 3x the envelope (the largest relative difference so far) of a
//    control, the single session restarted from its parameters times 1 + 1e-6 u (rounding-
//    sized noise), plus a floor of 1e-3 relative (Adam's sign-like updates on rounding noise
//    can reach the array before they reach the control).
// Measured (CAMPO_GAN_ARRAY_DEBUG=1 prints every step): with Adam over 50 iterations model 0
// stays within 1e-6 of its single session for 27 iterations, model 1 for 10; then both
// drift as their controls do: at the end the array's worst relative difference is 0.18
// (loss_D) / 0.16 (loss_G) against control envelopes of 0.04 / 0.06 (model 0) and 0.23 /
// 0.15 (model 1). SGD (10 iterations) stays within 3e-7 against controls of 4e-7..7e-7.
// An array that mixes models up (a wrong slice, another model's noise or learning rate, a
// gradient shared between models) is off by 1e-2 or more from the first update.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "graph/checkpoint.h"
#include "runtime/rng.h"
#include "tests/test_util.h"
#include "tests/train/array_test_util.h"
#include "train/gan_trainer.h"

namespace campo {
namespace {

constexpr double kControlFactor = 3.0, kFirstStepsRtol = 1e-5, kLossFloor = 1e-3;
constexpr int64_t kBatch = 8, kSamples = 4;

DcganOptions small_dcgan() {
  DcganOptions o;
  o.image_size = 32;
  o.channels = 3;
  o.ngf = o.ndf = 16;
  return o;
}

ArrayHyperparameters two_gans() {
  ArrayHyperparameters h;
  h.lr = {2e-4f, 5e-4f};
  h.momentum = {0.9f, 0.5f};  // sgd only
  h.weight_decay = {0.0f, 1e-3f};
  h.dropout = {0, 0};
  h.seed = {3, 11};
  return h;
}

OptimizerConfig shared_optimizer(OptimizerConfig::Kind kind) {
  OptimizerConfig o;
  o.kind = kind;
  o.beta1 = 0.5f;  // the DCGAN example's
  return o;
}

// Model i's optimizer as a single session gets it.
OptimizerConfig single_optimizer(OptimizerConfig o, const ArrayHyperparameters& h, int i) {
  o.momentum = h.momentum[size_t(i)];
  o.weight_decay = h.weight_decay[size_t(i)];
  return o;
}

using testing::perturb_parameters;

// The largest control envelope each test saw (printed with CAMPO_GAN_ARRAY_DEBUG).
void expect_gans_train_as_singles(OptimizerConfig::Kind kind, int steps) {
  const ArrayHyperparameters h = two_gans();
  const int n = h.size();
  const DcganOptions m = small_dcgan();
  const OptimizerConfig shared = shared_optimizer(kind);
  GanSession array(m, kBatch, shared, h, default_cpu_backend(), kSamples);
  ASSERT_EQ(array.size(), n);
  std::vector<std::unique_ptr<GanSession>> singles, controls;
  for (int i = 0; i < n; ++i) {
    for (auto* list : {&singles, &controls})
      list->push_back(std::make_unique<GanSession>(m, kBatch, single_optimizer(shared, h, i),
                                                   h.seed[size_t(i)], default_cpu_backend(),
                                                   kSamples));
    perturb_parameters(controls.back()->variables());
  }
  // The starting weights, buffers and optimizer state: exactly the single sessions'.
  for (int i = 0; i < n; ++i) {
    const VariableStore& single = singles[size_t(i)]->variables();
    ASSERT_EQ(array.variables().names().size(), single.names().size());
    for (const std::string& name : single.names()) {
      const Tensor a = array.read_model_variable(i, name);
      ASSERT_EQ(a.shape(), single.at(name).shape()) << name;
      ASSERT_EQ(a.to_float_vector(), single.read(name).to_float_vector())
          << "model " << i << " " << name;
    }
  }
  // Every model's fixed-noise samples are its single session's (its own fixed noise).
  const std::vector<Tensor> samples = array.generate_model_samples();
  for (int i = 0; i < n; ++i)
    EXPECT_TRUE(testing::all_close(samples[size_t(i)],
                                   singles[size_t(i)]->generate_model_samples()[0], 1e-5f, 1e-6f))
        << "model " << i;

  Rng rng(21);
  std::vector<double> envelope_d(size_t(n), 0.0), envelope_g(size_t(n), 0.0);
  double worst_d = 0, worst_g = 0;
  for (int step = 0; step < steps; ++step) {
    // Each model its own real batch: the stacking must keep them apart.
    std::vector<Tensor> real;
    for (int i = 0; i < n; ++i)
      real.push_back(testing::random_tensor({kBatch, m.channels, m.image_size, m.image_size}, rng));
    std::vector<const Tensor*> pointers;
    for (const Tensor& t : real) pointers.push_back(&t);
    const std::vector<GanSession::StepStats> fused = array.step(pointers, h.lr);
    for (int i = 0; i < n; ++i) {
      const GanSession::StepStats one = singles[size_t(i)]->step(real[size_t(i)], h.lr[size_t(i)]);
      const GanSession::StepStats ctrl =
          controls[size_t(i)]->step(real[size_t(i)], h.lr[size_t(i)]);
      auto check = [&](const char* what, double got, double want, double control, double& envelope,
                       double& worst) {
        envelope = std::max(envelope, std::abs(control - want) / std::abs(want));
        const double rel = std::abs(got - want) / std::abs(want);
        worst = std::max(worst, rel);
        if (getenv("CAMPO_GAN_ARRAY_DEBUG"))
          std::printf("step %d model %d %s array %.3g control %.3g\n", step, i, what, rel,
                      envelope);
        EXPECT_LE(rel, step < 3 ? kFirstStepsRtol : kControlFactor * envelope + kLossFloor)
            << what << " of model " << i << " at step " << step;
      };
      check("loss_D", fused[size_t(i)].loss_d, one.loss_d, ctrl.loss_d, envelope_d[size_t(i)],
            worst_d);
      check("loss_G", fused[size_t(i)].loss_g, one.loss_g, ctrl.loss_g, envelope_g[size_t(i)],
            worst_g);
    }
  }
  if (getenv("CAMPO_GAN_ARRAY_DEBUG"))
    for (int i = 0; i < n; ++i)
      std::printf("model %d: control envelope loss_D %.3g loss_G %.3g; array worst %.3g / %.3g\n",
                  i, envelope_d[size_t(i)], envelope_g[size_t(i)], worst_d, worst_g);
}

TEST(GanArrayTest, AdamArrayTrainsAsTwoSingleSessions) {
  expect_gans_train_as_singles(OptimizerConfig::Kind::adam, 50);
}

TEST(GanArrayTest, SgdArrayWithPerModelMomentumTrainsAsTwoSingleSessions) {
  expect_gans_train_as_singles(OptimizerConfig::Kind::sgd, 10);
}

TEST(GanArrayTest, EachModelsCheckpointRestoresIntoASingleSession) {
  const ArrayHyperparameters h = two_gans();
  const DcganOptions m = small_dcgan();
  const OptimizerConfig adam = shared_optimizer(OptimizerConfig::Kind::adam);
  GanSession array(m, kBatch, adam, h, default_cpu_backend(), kSamples);
  Rng rng(5);
  const Tensor real = testing::random_tensor({kBatch, m.channels, m.image_size, m.image_size}, rng);
  for (int step = 0; step < 2; ++step) array.step({&real, &real}, h.lr);
  const std::string path =
      (std::filesystem::temp_directory_path() / "campo_gan_array_1.safetensors").string();
  array.save_model(1, path, 0, 2, "adam");
  const std::map<std::string, std::string> meta = read_safetensors_metadata(path);
  EXPECT_EQ(meta.at("array_index"), "1");
  EXPECT_EQ(meta.at("array_size"), "2");

  // A single session of another seed reads it: parameters, buffers and Adam's state alike.
  GanSession single(m, kBatch, single_optimizer(adam, h, 1), 99, default_cpu_backend(), kSamples);
  single.restore(path, "adam");
  EXPECT_EQ(single.iterations(), 2);
  for (const std::string& name : single.variables().names())
    EXPECT_EQ(single.variables().read(name).to_float_vector(),
              array.read_model_variable(1, name).to_float_vector())
        << name;
  // ... and continues as model 1: the same noise, the same step count.
  const Tensor next = testing::random_tensor({kBatch, m.channels, m.image_size, m.image_size}, rng);
  const GanSession::StepStats alone = single.step(next, h.lr[1]);
  const GanSession::StepStats fused = array.step({&next, &next}, h.lr)[1];
  EXPECT_NEAR(fused.loss_d, alone.loss_d, kFirstStepsRtol * std::abs(alone.loss_d));
  EXPECT_NEAR(fused.loss_g, alone.loss_g, kFirstStepsRtol * std::abs(alone.loss_g));
  std::filesystem::remove(path);

  // The array itself is not restored or saved as a whole.
  EXPECT_THROW(array.restore(path, "adam"), Error);
  EXPECT_THROW(array.save(path, 0, 0, "adam"), Error);
}

}  // namespace
}  // namespace campo
