// DCGAN honours the training options that apply to it: --save/--save-every/--resume (one
// checkpoint of both networks and both optimizer states; a resumed run reproduces the
// uninterrupted one bit for bit), --optimizer sgd with --momentum/--nesterov, and the
// learning-rate schedule. The session runs G's forward pass once per iteration and runs
// on the backend it is given.
#include "train/gan_trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <filesystem>
#include <map>
#include <sstream>

#include "graph/checkpoint.h"
#include "runtime/strict_backend.h"
#include "train/trainer.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() /
          ("campo_gan_" + std::to_string(long(::getpid())) + "_" + name))
      .string();
}

// 6 steps per epoch of 8 synthetic 32x32 images, 2 epochs; small networks.
TrainOptions small_gan(const std::string& optimizer) {
  TrainOptions o = training_options_for("dcgan");
  o.dataset = "synthetic";
  o.image_size = 32;
  o.channels = 1;
  o.batch = 8;
  o.train_limit = 48;
  o.epochs = 2;
  o.ngf = o.ndf = 8;
  o.nz = 16;
  o.samples_dir = "";
  o.report.progress = Progress::none;
  o.precision = Precision::fp32;
  o.optimizer = parse_optimizer(optimizer);
  // The rate halves each epoch (cosine would decay over --steps, which the first half of
  // a resumed run sets differently).
  o.schedule.kind = LrSchedule::Kind::step;
  o.schedule.step_epochs = 1;
  o.schedule.gamma = 0.5f;
  if (optimizer == "sgd") {
    o.lr = 0.01f;
    o.nesterov = true;
    o.schedule.warmup_steps = 3;
  }
  return o;
}

void check_gan_resume(const std::string& optimizer) {
  const std::string path = temp_path("resume_" + optimizer + ".safetensors");
  std::ostringstream log;
  const GanResult full = train_gan(small_gan(optimizer), log, false);
  ASSERT_EQ(full.loss_d_history.size(), 12u);

  TrainOptions first = small_gan(optimizer);
  first.max_steps = 8;  // stops in the middle of epoch 2
  first.checkpoint.save_path = path;
  const GanResult a = train_gan(first, log, false);
  ASSERT_EQ(a.steps, 8);
  const std::map<std::string, std::string> meta = read_safetensors_metadata(path);
  EXPECT_EQ(meta.at("campo.model"), "dcgan");
  EXPECT_EQ(meta.at("campo.step"), "8");
  EXPECT_EQ(meta.at("campo.epoch"), "1");
  EXPECT_EQ(meta.at("campo.position_in_epoch"), "2");
  EXPECT_EQ(meta.at("campo.optimizer"), optimizer);
  for (const char* rng : {"campo.rng.noise", "campo.rng.d_step", "campo.rng.g_step"})
    EXPECT_EQ(meta.count(rng), 1u) << rng;
  // Both networks under their names, both optimizer states under "optimizer.".
  const std::vector<std::string> names = checkpoint_tensor_names(path);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_TRUE(has("netG.main.0.weight"));
  EXPECT_TRUE(has("netD.main.0.weight"));
  int g_state = 0, d_state = 0;
  for (const std::string& n : names) {
    g_state += n.rfind("optimizer.netG.", 0) == 0;
    d_state += n.rfind("optimizer.netD.", 0) == 0;
  }
  EXPECT_GT(g_state, 0);
  EXPECT_GT(d_state, 0);

  TrainOptions second = small_gan(optimizer);
  second.checkpoint.resume_path = path;
  const GanResult b = train_gan(second, log, false);
  ASSERT_EQ(b.loss_d_history.size(), 4u) << log.str();
  EXPECT_EQ(b.steps, 12);
  EXPECT_NE(log.str().find("resumed from " + path + " at step 8 (epoch 2, batch 2)"),
            std::string::npos)
      << log.str();
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(a.loss_d_history[i], full.loss_d_history[i]) << "step " << i;
    EXPECT_EQ(a.loss_g_history[i], full.loss_g_history[i]) << "step " << i;
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b.loss_d_history[i], full.loss_d_history[8 + i]) << "resumed step " << 8 + i;
    EXPECT_EQ(b.loss_g_history[i], full.loss_g_history[8 + i]) << "resumed step " << 8 + i;
  }
  fs::remove(path);
}

TEST(GanResumeTest, AdamReproducesTheUninterruptedRun) { check_gan_resume("adam"); }
TEST(GanResumeTest, SgdNesterovReproducesTheUninterruptedRun) { check_gan_resume("sgd"); }

TEST(GanResumeTest, SaveEveryWritesMidEpochAndTheEndIsAnEpochStart) {
  const std::string path = temp_path("every.safetensors");
  TrainOptions o = small_gan("adam");
  o.epochs = 1;
  o.checkpoint.save_path = path;
  o.checkpoint.save_every = 4;
  std::ostringstream log;
  train_gan(o, log, false);
  // The last save is the epoch end, stored as the start of the next epoch.
  const auto meta = read_safetensors_metadata(path);
  EXPECT_EQ(meta.at("campo.step"), "6");
  EXPECT_EQ(meta.at("campo.epoch"), "1");
  EXPECT_EQ(meta.at("campo.position_in_epoch"), "0");
  EXPECT_NE(log.str().find("campo: checkpoint " + path), std::string::npos) << log.str();
  fs::remove(path);
}

// A checkpoint of another model, another optimizer, or a position past the run is refused
// with a message naming the file; nothing is trained.
TEST(GanResumeTest, WrongCheckpointsAreRefused) {
  const std::string path = temp_path("wrong.safetensors");
  TrainOptions o = small_gan("adam");
  o.epochs = 1;
  o.checkpoint.save_path = path;
  std::ostringstream log;
  train_gan(o, log, false);

  TrainOptions sgd = small_gan("sgd");
  sgd.checkpoint.resume_path = path;
  try {
    train_gan(sgd, log, false);
    ADD_FAILURE() << "resumed an adam checkpoint with sgd";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was trained with optimizer 'adam', not 'sgd'"),
              std::string::npos)
        << e.what();
  }
  TrainOptions past = small_gan("adam");
  past.epochs = 1;  // the checkpoint is at the start of epoch 2
  past.checkpoint.resume_path = path;
  try {
    train_gan(past, log, false);
    ADD_FAILURE() << "resumed a run with nothing left to train";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is at step 6, where this run of 6 steps ends: nothing "
                                         "left to train"),
              std::string::npos)
        << e.what();
  }

  const std::string classifier = temp_path("classifier.safetensors");
  TrainOptions t;
  t.model = "mlp";
  t.dataset = "synthetic";
  t.precision = Precision::fp32;
  t.train_limit = 64;
  t.test_limit = 16;
  t.batch = 32;
  t.report.progress = Progress::none;
  t.checkpoint.save_path = classifier;
  train(t, log, false);
  TrainOptions wrong = small_gan("adam");
  wrong.checkpoint.resume_path = classifier;
  try {
    train_gan(wrong, log, false);
    ADD_FAILURE() << "resumed a classifier checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds model 'mlp', not 'dcgan'"), std::string::npos)
        << e.what();
  }
  fs::remove(path);
  fs::remove(classifier);
}

// The optimizer and the schedule reach the step graphs: the first step is the same (same
// initial weights, same data and noise; warm-up aside), later ones differ.
TEST(GanTrainerTest, OptimizerAndScheduleChangeTheRun) {
  auto run = [](TrainOptions o) {
    o.epochs = 1;
    o.max_steps = 3;
    std::ostringstream log;
    return train_gan(o, log, false);
  };
  TrainOptions base = small_gan("adam");
  base.schedule.kind = LrSchedule::Kind::constant;
  const GanResult adam = run(base);
  TrainOptions sgd = base;
  sgd.optimizer = OptimizerConfig::Kind::sgd;
  const GanResult with_sgd = run(sgd);
  TrainOptions cosine = base;
  cosine.schedule.kind = LrSchedule::Kind::cosine;
  const GanResult with_cosine = run(cosine);
  TrainOptions decay = base;
  decay.weight_decay = 0.5f;
  const GanResult with_decay = run(decay);
  for (const GanResult* r : {&with_sgd, &with_cosine, &with_decay}) {
    ASSERT_EQ(r->loss_d_history.size(), 3u);
    EXPECT_EQ(r->loss_d_history[0], adam.loss_d_history[0]);  // D's loss before any update
    EXPECT_NE(r->loss_d_history[2], adam.loss_d_history[2]);
  }
}

DcganOptions small_dcgan() {
  DcganOptions m;
  m.image_size = 32;
  m.channels = 1;
  m.nz = 16;
  m.ngf = m.ndf = 8;
  return m;
}

OptimizerConfig adam() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::adam;
  o.beta1 = 0.5f;
  return o;
}

// G's forward pass runs once per iteration, in the D step: the G step graph holds none of
// it and reads G(z) and the activations G's backward pass needs from placeholders, which
// the D step's values of the same nodes fill, in the dtypes the D step's plan gave them.
TEST(GanOneForwardTest, TheGStepReadsGsForwardPassFromTheDStep) {
  for (Precision policy : {Precision::fp32, Precision::amp}) {
    PrecisionConfig p;
    p.policy = policy;
    GanSession s(small_dcgan(), 4, adam(), 1, default_cpu_backend(), 4, p);
    auto generator_forward_nodes = [](const Graph& g) {
      int n = 0;
      for (const Node& node : g.nodes())
        n += node.phase == Phase::forward && node.name.rfind("netG.", 0) == 0 &&
             node.kind != OpKind::Variable && node.kind != OpKind::Cast;
      return n;
    };
    EXPECT_GT(generator_forward_nodes(s.d_graph()), 0);
    EXPECT_EQ(generator_forward_nodes(s.g_graph()), 0);
    ASSERT_FALSE(s.saved_values().empty());
    bool fake = false, low = false;
    for (const GanSession::SavedValue& v : s.saved_values()) {
      const NodeId id = s.g_graph().find_node(v.placeholder);
      ASSERT_GE(id, 0) << v.placeholder;
      EXPECT_EQ(s.g_graph().node(id).kind, OpKind::Placeholder);
      const Value& placeholder = s.g_graph().value(s.g_graph().node(id).outputs[0]);
      const Value& source = s.d_graph().value(v.source);
      EXPECT_EQ(placeholder.shape, source.shape) << v.placeholder;
      EXPECT_EQ(placeholder.dtype, source.dtype) << v.placeholder;
      EXPECT_EQ("saved/" + s.d_graph().node(source.producer).name,
                v.placeholder.substr(0, v.placeholder.find(':')));
      fake = fake || s.d_graph().node(source.producer).kind == OpKind::Tanh;
      low = low || is_low_precision(source.dtype);
    }
    EXPECT_TRUE(fake) << "G(z) is not handed to the G step";
    EXPECT_EQ(low, policy == Precision::amp);
    EXPECT_GE(s.g_graph().find_node("z"), 0);  // G's first filter gradient reads z
    Rng rng(3);
    Tensor real = Tensor::empty({4, 1, 32, 32}, DType::f32);
    for (int64_t i = 0; i < real.numel(); ++i) real.data_as<float>()[i] = rng.uniform(-1, 1);
    const GanSession::StepStats st = s.step(real, 2e-4f);
    EXPECT_TRUE(std::isfinite(st.loss_d) && std::isfinite(st.loss_g));
  }
}

// Everything of the session is on its backend: on the strict CPU backend (host access to
// its tensors throws) an array of two models trains, samples and saves as on the CPU, bit for
// bit, through the backend's copies, and nothing comes from the default CPU backend.
TEST(GanOneForwardTest, RunsOnTheBackendItIsGiven) {
  ArrayHyperparameters h;
  h.lr = {2e-4f, 1e-4f};
  h.momentum = {0.9f, 0.9f};
  h.weight_decay = {0.0f, 1e-3f};
  h.dropout = {0.0f, 0.0f};
  h.seed = {5, 6};
  PrecisionConfig p;
  p.policy = Precision::amp;
  struct Run {
    std::vector<uint32_t> stats;
    std::vector<std::vector<float>> samples;
    std::string checkpoint;
  };
  auto run = [&](std::shared_ptr<Backend> backend, const std::string& tag) {
    GanSession s(small_dcgan(), 4, adam(), h, std::move(backend), 4, p);
    Rng rng(3);
    Tensor real = Tensor::empty({4, 1, 32, 32}, DType::f32);
    Run r;
    for (int step = 0; step < 3; ++step) {
      for (int64_t i = 0; i < real.numel(); ++i) real.data_as<float>()[i] = rng.uniform(-1, 1);
      for (const GanSession::StepStats& st : s.step({&real, &real}, h.lr))
        for (float v : {st.loss_d, st.loss_g, st.d_x, st.d_g_z1, st.d_g_z2})
          r.stats.push_back(std::bit_cast<uint32_t>(v));
    }
    for (const Tensor& t : s.generate_model_samples()) r.samples.push_back(t.to_float_vector());
    r.checkpoint = temp_path("backend_" + tag + ".safetensors");
    s.save_model(1, r.checkpoint, 0, 3, "adam");
    return r;
  };
  const Run cpu = run(default_cpu_backend(), "cpu");
  auto strict = std::make_shared<StrictCpuBackend>();
  const auto& default_cpu = dynamic_cast<const CpuBackend&>(*default_cpu_backend());
  const int64_t allocations = default_cpu.allocation_count();
  const Run other = run(strict, "strict");
  EXPECT_EQ(default_cpu.allocation_count(), allocations);
  EXPECT_EQ(other.stats, cpu.stats);
  EXPECT_EQ(other.samples, cpu.samples);
  const std::map<std::string, Tensor> saved_cpu = read_safetensors(cpu.checkpoint),
                                      saved_other = read_safetensors(other.checkpoint);
  ASSERT_EQ(saved_other.size(), saved_cpu.size());
  for (const auto& [name, t] : saved_cpu)
    EXPECT_EQ(saved_other.at(name).to_float_vector(), t.to_float_vector()) << name;
  EXPECT_GE(strict->to_device_copies, 3 * 3);
  EXPECT_GE(strict->to_host_copies, 3 * 5);
  EXPECT_THROW(GanSession(small_dcgan(), 4, adam(), 1, nullptr), Error);
  fs::remove(cpu.checkpoint);
  fs::remove(other.checkpoint);
}

TEST(GanTrainerTest, OptionsThatCannotApplyAreErrors) {
  TrainOptions o = training_options_for("dcgan");
  EXPECT_THROW(parse_optimizer("rmsprop"), Error);
  o.nesterov = true;  // adam
  EXPECT_THROW(validate(o), Error);
  o = training_options_for("dcgan");
  EXPECT_THROW(parse_lr_schedule("linear"), Error);
  o.schedule.gamma = 0;
  EXPECT_THROW(validate(o), Error);
  o = training_options_for("dcgan");
  o.checkpoint.save_every = 5;  // without save_path
  EXPECT_THROW(validate(o), Error);
  o = training_options_for("dcgan");
  o.samples_dir = "";
  o.checkpoint.resume_path = "/no/such/file.safetensors";
  EXPECT_THROW(validate(o), Error);
}

}  // namespace
}  // namespace campo
