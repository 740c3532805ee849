// DCGAN: the PyTorch example's parameter counts and state_dict names (under "netG." /
// "netD."), output shapes at 32 and 64 px with 1 and 3 channels, initialisation, the
// training graphs' update sets, the PNG grid writer, and a short training run.
#include "models/dcgan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "datasets/image_file.h"
#include "graph/executor.h"
#include "tests/test_util.h"
#include "train/gan_trainer.h"
#include "train/make_session.h"

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb_image.h>
#pragma GCC diagnostic pop

namespace campo {
namespace {

struct Nets {
  Graph graph;
  VariableStore vars{0, default_cpu_backend()};
  ValueId images = kNoValue, logits = kNoValue;

  Nets(const DcganOptions& o, int64_t batch) {
    Builder b(graph, vars);
    images = build_dcgan_generator(b, b.placeholder("z", {batch, o.nz, 1, 1}), o);
    logits = build_dcgan_discriminator(b, images, o);
  }
  int64_t count(const std::string& net) const {
    int64_t n = 0;
    for (const auto& name : dcgan_parameter_names(vars, net)) n += vars.at(name).numel();
    return n;
  }
};

DcganOptions options(int size, int channels) {
  DcganOptions o;
  o.image_size = size;
  o.channels = channels;
  return o;
}

TEST(DcganTest, ParameterCountsMatchThePyTorchExample) {
  Nets n(options(64, 3), 2);
  EXPECT_EQ(n.count("netG"), 3576704);
  EXPECT_EQ(n.count("netD"), 2765568);
  EXPECT_EQ(n.vars.count_elements(VariableKind::parameter), 3576704 + 2765568);
  // 32 px: one stage fewer (derived from the layer list in models/dcgan.h):
  // G 100*256*16 + 256*128*16 + 128*64*16 + 64*3*16 + BN 2*(256+128+64)
  // D 3*64*16 + 64*128*16 + 128*256*16 + 256*16 + BN 2*(128+256)
  Nets small(options(32, 3), 2);
  EXPECT_EQ(small.count("netG"), 1068928);
  EXPECT_EQ(small.count("netD"), 663296);
}

TEST(DcganTest, NamesFollowTheExampleStateDict) {
  Nets n(options(64, 3), 2);
  auto shape = [&](const std::string& name) { return n.vars.at(name).shape(); };
  EXPECT_EQ(shape("netG.main.0.weight"), Shape({100, 512, 4, 4}));  // ConvTranspose2d: [in, out]
  EXPECT_EQ(shape("netG.main.1.weight"), Shape({512}));
  EXPECT_EQ(shape("netG.main.1.running_var"), Shape({512}));
  EXPECT_EQ(shape("netG.main.3.weight"), Shape({512, 256, 4, 4}));
  EXPECT_EQ(shape("netG.main.10.bias"), Shape({64}));
  EXPECT_EQ(shape("netG.main.12.weight"), Shape({64, 3, 4, 4}));
  EXPECT_EQ(shape("netD.main.0.weight"), Shape({64, 3, 4, 4}));
  EXPECT_FALSE(n.vars.contains("netD.main.1.weight"));  // no BN after D's first conv
  EXPECT_EQ(shape("netD.main.3.running_mean"), Shape({128}));
  EXPECT_EQ(shape("netD.main.8.weight"), Shape({512, 256, 4, 4}));
  EXPECT_EQ(shape("netD.main.11.weight"), Shape({1, 512, 4, 4}));
  for (const auto& name : n.vars.names())
    EXPECT_TRUE(name.rfind("netG.main.", 0) == 0 || name.rfind("netD.main.", 0) == 0) << name;
  EXPECT_EQ(dcgan_parameter_names(n.vars, "netG").size(), 13u);  // 5 convs + 4 BN x 2
  EXPECT_EQ(dcgan_parameter_names(n.vars, "netD").size(), 11u);  // 5 convs + 3 BN x 2
  EXPECT_EQ(n.graph.nodes_of_kind(OpKind::Conv2DBackpropInput).size(), 5u);
  EXPECT_EQ(n.graph.nodes_of_kind(OpKind::Sigmoid).size(), 0u);  // D returns logits
  EXPECT_TRUE(n.vars.contains("netG.main.9.weight"));
  Nets small(options(32, 1), 2);
  EXPECT_EQ(small.vars.at("netG.main.0.weight").shape(), Shape({100, 256, 4, 4}));
  EXPECT_EQ(small.vars.at("netG.main.9.weight").shape(), Shape({64, 1, 4, 4}));
  EXPECT_EQ(small.vars.at("netD.main.8.weight").shape(), Shape({1, 256, 4, 4}));
}

TEST(DcganTest, OutputShapes) {
  for (int size : {32, 64})
    for (int channels : {1, 3}) {
      SCOPED_TRACE(std::to_string(size) + " px, " + std::to_string(channels) + " channels");
      Nets n(options(size, channels), 3);
      EXPECT_EQ(n.graph.value(n.images).shape, Shape({3, channels, size, size}));
      EXPECT_EQ(n.graph.value(n.logits).shape, Shape({3}));
    }
  // [N, nz] noise is accepted too.
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId img = build_dcgan_generator(b, b.placeholder("z", {5, 100}), options(32, 1));
  EXPECT_EQ(g.value(img).shape, Shape({5, 1, 32, 32}));
  EXPECT_THROW(build_dcgan_generator(b, b.placeholder("bad", {5, 99}), options(32, 1)), Error);
  EXPECT_THROW(build_dcgan_discriminator(b, b.placeholder("x", {5, 3, 32, 32}), options(64, 3)),
               Error);
  EXPECT_THROW(check_dcgan_options(options(48, 3)), Error);
}

TEST(DcganTest, InitialisationAndForwardRange) {
  const DcganOptions o = options(32, 1);
  Nets n(o, 4);
  auto moments = [&](const std::string& name) {
    double s = 0, sq = 0;
    const auto v = n.vars.at(name).to_float_vector();
    for (float x : v) s += x, sq += double(x) * x;
    const double mean = s / double(v.size());
    return std::pair<double, double>{mean, std::sqrt(sq / double(v.size()) - mean * mean)};
  };
  auto [wm, ws] = moments("netG.main.3.weight");  // 524,288 draws of N(0, 0.02)
  EXPECT_NEAR(wm, 0.0, 1e-3);
  EXPECT_NEAR(ws, 0.02, 0.02 * 0.01);
  auto [bm, bs] = moments("netD.main.3.weight");  // BN weight N(1, 0.02), 128 draws
  EXPECT_NEAR(bm, 1.0, 0.01);
  EXPECT_NEAR(bs, 0.02, 0.01);
  for (float v : n.vars.at("netD.main.3.bias").to_float_vector()) EXPECT_EQ(v, 0.0f);

  CompileOptions co;
  co.fetches = {n.images, n.logits};
  Executable exe(n.graph, n.vars, co);
  Rng rng(2);
  Tensor& z = exe.input("z");
  for (int64_t i = 0; i < z.numel(); ++i) z.data_as<float>()[i] = rng.normal();
  exe.run();
  for (float v : exe.output(n.images).to_float_vector()) ASSERT_TRUE(v > -1.0f && v < 1.0f);
  for (float v : exe.output(n.logits).to_float_vector()) ASSERT_TRUE(std::isfinite(v));
}

TEST(GanSessionTest, EachStepUpdatesOnlyItsNetwork) {
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::adam;
  DcganOptions o = options(32, 1);
  o.ngf = o.ndf = 8;
  GanSession s(o, 4, adam, 1, default_cpu_backend(), 16);
  auto updated = [](const Graph& g) {
    std::vector<std::string> names;
    for (NodeId id : g.nodes_of_kind(OpKind::ApplyAdam)) {
      const Node& n = g.node(id);
      const UpdateLayout l = update_layout(n.kind, n.attrs);
      for (int t = 0; t < l.tensors; ++t)
        names.push_back(g.node(g.value(n.inputs[size_t(l.input(0, t))]).producer).name);
    }
    return names;
  };
  EXPECT_EQ(updated(s.d_graph()), dcgan_parameter_names(s.variables(), "netD"));
  EXPECT_EQ(updated(s.g_graph()), dcgan_parameter_names(s.variables(), "netG"));
  // D's step does not differentiate G: no gradient of a transposed convolution's filter.
  for (NodeId id : s.d_graph().nodes_of_kind(OpKind::Conv2DBackpropFilter))
    EXPECT_EQ(s.d_graph().node(id).name.find("netG"), std::string::npos)
        << s.d_graph().node(id).name;

  Rng rng(4);
  const Tensor real = testing::random_tensor({4, 1, 32, 32}, rng);
  const Tensor g_before = s.variables().at("netG.main.0.weight").clone();
  const Tensor d_before = s.variables().at("netD.main.0.weight").clone();
  const GanSession::StepStats st = s.step(real, 2e-4f);
  EXPECT_NEAR(st.loss_d, 2 * std::log(2.0f), 0.3f);  // D starts near chance
  EXPECT_GT(st.d_x, 0.0f);
  EXPECT_LT(st.d_x, 1.0f);
  EXPECT_FALSE(testing::all_close(s.variables().at("netG.main.0.weight"), g_before, 0, 0));
  EXPECT_FALSE(testing::all_close(s.variables().at("netD.main.0.weight"), d_before, 0, 0));
  EXPECT_EQ(s.generate_samples().shape(), Shape({16, 1, 32, 32}));
}

// Cost-aware on both step graphs: each is profiled on scratch variables (the session's
// weights are untouched by the timed steps), planned and cast; deny ops stay f32.
TEST(GanSessionTest, CostAwarePlansBothStepGraphs) {
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::adam;
  DcganOptions o = options(32, 1);
  o.ngf = o.ndf = 8;
  PrecisionConfig precision;
  precision.policy = Precision::cost_aware;
  precision.profile_warmup = 1;
  precision.profile_steps = 1;
  GanSession fp32(o, 4, adam, 1, default_cpu_backend(), 16);
  GanSession s(o, 4, adam, 1, default_cpu_backend(), 16, precision);
  ASSERT_NE(s.d_plan(), nullptr);
  ASSERT_NE(s.g_plan(), nullptr);
  EXPECT_EQ(fp32.d_plan(), nullptr);
  EXPECT_EQ(s.d_costs()->nodes.size(), s.d_plan()->low.size());
  int folded = 0;
  for (const Graph* g : {&s.d_graph(), &s.g_graph()}) {
    for (NodeId id : g->nodes_of_kind(OpKind::SigmoidCrossEntropyWithLogits))
      EXPECT_EQ(g->node(id).dtype, DType::f32);
    for (const Node& n : g->nodes()) folded += n.f32_output || n.weight_copy;
  }
  // The summary counts the casts folded into both graphs' producers and optimizer updates.
  EXPECT_EQ(s.precision_summary().casts.folded, folded);
  // Profiling did not move the session's weights: same initial values as the fp32 session.
  EXPECT_TRUE(testing::all_close(s.variables().at("netG.main.0.weight"),
                                 fp32.variables().at("netG.main.0.weight"), 0, 0));
  Rng rng(4);
  const GanSession::StepStats st = s.step(testing::random_tensor({4, 1, 32, 32}, rng), 2e-4f);
  EXPECT_TRUE(std::isfinite(st.loss_d) && std::isfinite(st.loss_g));
  precision.costs = std::make_shared<CostTable>();
  EXPECT_THROW(GanSession(o, 4, adam, 1, default_cpu_backend(), 16, precision), Error);
}

std::string temp_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() /
             ("campo_" + tag + "_" + std::to_string(long(::getpid())));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(PngGridTest, WritesAGridThatDecodes) {
  const std::string dir = temp_dir("png");
  // Three 2x3 RGB images: -1 (black), 0 (mid grey), 1 (white).
  std::vector<float> v;
  for (float value : {-1.0f, 0.0f, 1.0f})
    for (int i = 0; i < 3 * 2 * 3; ++i) v.push_back(value);
  const std::string path = dir + "/grid.png";
  write_png_grid(path, Tensor::from_vector(v, {3, 3, 2, 3}), 2, 1);
  int w = 0, h = 0, c = 0;
  unsigned char* px = stbi_load(path.c_str(), &w, &h, &c, 0);
  ASSERT_NE(px, nullptr) << stbi_failure_reason();
  EXPECT_EQ(w, 2 * (3 + 1) + 1);  // two per row
  EXPECT_EQ(h, 2 * (2 + 1) + 1);  // two rows
  EXPECT_EQ(c, 3);
  auto at = [&](int x, int y) { return int(px[(y * w + x) * c]); };
  EXPECT_EQ(at(0, 0), 0);    // padding
  EXPECT_EQ(at(1, 1), 0);    // image 0: -1
  EXPECT_EQ(at(5, 1), 128);  // image 1: 0 -> round(127.5)
  EXPECT_EQ(at(1, 4), 255);  // image 2: 1
  EXPECT_EQ(at(5, 4), 0);    // empty slot
  stbi_image_free(px);
  // Only the final file is left (the temporary was renamed).
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_png_grid(dir + "/no/such/dir/x.png", Tensor::from_vector(v, {3, 3, 2, 3})),
               Error);
  std::filesystem::remove_all(dir);
}

TEST(GanTrainerTest, ShortRunLowersDiscriminatorLossAndWritesSamples) {
  const std::string dir = temp_dir("gan");
  TrainOptions o = training_options_for("dcgan");
  o.dataset = "synthetic";
  o.image_size = 32;
  o.channels = 1;
  o.batch = 16;
  o.max_steps = 40;
  o.ngf = o.ndf = 16;
  o.train_limit = 640;
  o.samples_dir = dir;
  o.report.progress = Progress::none;
  o.precision = Precision::fp32;
  std::ostringstream log;
  const GanResult r = train_gan(o, log, false);
  ASSERT_EQ(r.steps, 40);
  ASSERT_EQ(r.loss_d_history.size(), 40u);
  double tail = 0;
  for (size_t i = 30; i < 40; ++i) tail += r.loss_d_history[i] / 10.0;
  EXPECT_NEAR(r.loss_d_history[0], 2 * std::log(2.0), 0.3);
  EXPECT_LT(tail, 0.7 * r.loss_d_history[0]) << log.str();
  EXPECT_EQ(r.parameters_g + r.parameters_d > 0, true);
  // 40 steps of 16 = one epoch of 640 samples: one grid, decodable, 8x8 of 32 px + padding.
  ASSERT_EQ(r.sample_files.size(), 1u);
  EXPECT_EQ(r.sample_files[0], dir + "/epoch_001.png");
  int w = 0, h = 0, c = 0;
  unsigned char* px = stbi_load(r.sample_files[0].c_str(), &w, &h, &c, 0);
  ASSERT_NE(px, nullptr) << stbi_failure_reason();
  EXPECT_EQ(w, 8 * 34 + 2);
  EXPECT_EQ(h, 8 * 34 + 2);
  EXPECT_EQ(c, 1);
  stbi_image_free(px);
  EXPECT_NE(log.str().find("\"model\":\"dcgan\""), std::string::npos) << log.str();
  std::filesystem::remove_all(dir);
}

TEST(GanTrainerTest, BadOptionsAreClearErrors) {
  TrainOptions o = training_options_for("dcgan");
  o.image_size = 48;
  EXPECT_THROW(check_training_options(o), Error);
  o = training_options_for("dcgan");
  o.channels = 2;
  EXPECT_THROW(check_training_options(o), Error);
  o = training_options_for("dcgan");
  o.dataset = "cifar";
  EXPECT_THROW(check_training_options(o), Error);
  o = training_options_for("dcgan");
  o.lr = -1;
  EXPECT_THROW(check_training_options(o), Error);
}

}  // namespace
}  // namespace campo
