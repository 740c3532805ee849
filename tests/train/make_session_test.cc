// make_session: the one place a model becomes its session, for every model family; and the
// model table's capability queries that the commands ask instead of a model's family.
#include "train/make_session.h"

#include <gtest/gtest.h>

#include "models/models.h"
#include "train/gan_trainer.h"
#include "train/trainer.h"

namespace campo {
namespace {

SessionSpec spec_of(const std::string& model, const Shape& input, int classes) {
  SessionSpec s;
  s.graph.model = model;
  s.graph.model_options.in_channels = input.size() == 3 ? int(input[0]) : 1;
  s.graph.model_options.image_size = input.size() == 3 ? int(input[1]) : 28;
  s.graph.model_options.num_classes = classes;
  s.graph.model_options.bert_config = "tiny";
  s.graph.image_shape = input;
  s.graph.batch = 4;
  s.graph.optimizer.kind = training_defaults(model).optimizer.value_or(OptimizerConfig::Kind::sgd);
  s.models = one_model(s.graph.optimizer, 7);
  s.gan_samples = 1;
  return s;
}

TEST(MakeSessionTest, EveryFamilyGetsItsSessionStepGraphsAndBatches) {
  // A classifier: one step graph, images and one label per image.
  std::unique_ptr<Session> lenet =
      make_session(spec_of("lenet", {1, 28, 28}, 10), default_cpu_backend());
  ASSERT_NE(dynamic_cast<TrainingSession*>(lenet.get()), nullptr);
  ASSERT_EQ(lenet->step_graphs().size(), 1u);
  EXPECT_EQ(lenet->step_graphs()[0].name, "training step");
  Rng rng(1);
  Batch b = lenet->random_batch(rng);
  EXPECT_EQ(b.images.shape(), (Shape{4, 1, 28, 28}));
  EXPECT_EQ(b.labels.shape(), (Shape{4}));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_GE(b.labels.data_as<int32_t>()[i], 0);
    EXPECT_LT(b.labels.data_as<int32_t>()[i], 10);
  }
  const float loss = lenet->step_models({&b}, {0.01f}, {})[0][0];
  EXPECT_TRUE(std::isfinite(loss)) << loss;

  // BERT's masked LM: token ids and a target per token, all below the vocabulary.
  std::unique_ptr<Session> bert = make_session(spec_of("bert", {16}, 100), default_cpu_backend());
  ASSERT_NE(dynamic_cast<TrainingSession*>(bert.get()), nullptr);
  b = bert->random_batch(rng);
  EXPECT_EQ(b.images.dtype(), DType::i32);
  EXPECT_EQ(b.images.shape(), (Shape{4, 16}));
  EXPECT_EQ(b.labels.shape(), (Shape{4, 16}));
  for (int64_t i = 0; i < b.images.numel(); ++i) EXPECT_LT(b.images.data_as<int32_t>()[i], 100);

  // A GAN: its two step graphs in the order a step runs them, real images in [-1, 1] and
  // no labels (nothing to classify), DCGAN's Adam beta1.
  std::unique_ptr<Session> dcgan =
      make_session(spec_of("dcgan", {1, 32, 32}, 10), default_cpu_backend());
  auto* gan = dynamic_cast<GanSession*>(dcgan.get());
  ASSERT_NE(gan, nullptr);
  const std::vector<StepGraph> graphs = dcgan->step_graphs();
  ASSERT_EQ(graphs.size(), 2u);
  EXPECT_EQ(graphs[0].name, "discriminator step");
  EXPECT_EQ(graphs[0].graph, &gan->d_graph());
  EXPECT_EQ(graphs[1].tag, "G step");
  EXPECT_EQ(graphs[1].graph, &gan->g_graph());
  b = dcgan->random_batch(rng);
  EXPECT_EQ(b.images.shape(), (Shape{4, 1, 32, 32}));
  EXPECT_FALSE(b.labels.defined());
  for (int64_t i = 0; i < b.images.numel(); ++i) {
    EXPECT_GE(b.images.data_as<float>()[i], -1.0f);
    EXPECT_LE(b.images.data_as<float>()[i], 1.0f);
  }
  const std::vector<float> values = dcgan->step_models({&b}, {2e-4f}, {})[0];
  ASSERT_EQ(values.size(), dcgan->step_values().size());
  for (float v : values) EXPECT_TRUE(std::isfinite(v));
}

TEST(MakeSessionTest, TheModelTableAnswersWhatCommandsAsk) {
  EXPECT_EQ(model_family("resnet18"), ModelFamily::classifier);
  EXPECT_EQ(model_family("bert"), ModelFamily::masked_lm);
  EXPECT_EQ(model_family("dcgan"), ModelFamily::gan);
  EXPECT_THROW(model_family("nope"), Error);
  for (const std::string& m : model_names()) {
    const bool gan = model_family(m) == ModelFamily::gan;
    EXPECT_EQ(step_graph_count(m), gan ? 2 : 1) << m;
    EXPECT_EQ(has_accuracy(m), !gan) << m;
  }
  EXPECT_EQ(step_graph_count("nope"), 1);
  EXPECT_FALSE(has_accuracy("nope"));
  EXPECT_FLOAT_EQ(bench_lr("dcgan", 1e-3f), 2e-4f);
  EXPECT_FLOAT_EQ(bench_lr("bert", 1e-3f), 1e-3f);
  EXPECT_FLOAT_EQ(bench_lr("vgg16", 1e-3f), 1e-3f);
}

TEST(MakeSessionTest, TrainingOptionsAreCheckedAsTheirSessionNeeds) {
  TrainOptions o = training_options_for("dcgan");
  o.image_size = 48;  // DCGAN's own: 32 or 64
  EXPECT_THROW(check_training_options(o), Error);
  o = training_options_for("lenet");
  o.image_size = 48;  // a classifier resizes to any size
  EXPECT_NO_THROW(check_training_options(o));
  o.eval_batch = 0;  // a classifier's own
  EXPECT_THROW(check_training_options(o), Error);
  o = training_options_for("dcgan");
  o.eval_batch = 0;  // a GAN evaluates nothing
  EXPECT_NO_THROW(check_training_options(o));
}

}  // namespace
}  // namespace campo
