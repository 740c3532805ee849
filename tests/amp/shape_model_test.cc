// Per-op models by shape (amp/shape_model.h, the fits in amp/calibration.h): node shapes from
// graphs, each fit recovering a known shape law on synthetic samples (and the linear model of
// the analytic features failing it, so the tests fail if the shape terms were ignored), the
// cross-validated choice of a form, shape models in the calibration file, and the committed
// calibration of the format before them still loading and predicting. No test looks at a
// timing.
#include "amp/shape_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "amp/calibration.h"
#include "graph/builder.h"
#include "tests/amp/calibration_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;
using testing::cpu_identity;
using testing::sample_calibration;
using testing::TempFile;

TEST(ShapeModelTest, NodeShapesOfConvolutionsMatMulsAndDataOps) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {8, 24, 16, 16});
  const ValueId w = b.placeholder("w", {64, 24, 3, 3});
  ConvAttrs strided;
  strided.stride_h = strided.stride_w = 2;
  strided.pad_h = strided.pad_w = 1;
  const ValueId y = b.conv2d(x, w, strided);  // [8, 64, 8, 8]
  NodeShape s = node_shape(g, g.value(y).producer);
  EXPECT_EQ(s.family, ShapeFamily::conv);
  EXPECT_EQ(s.dims, (std::array<double, kShapeDims>{8, 24, 64, 64, 9, 2, 1})) << describe_shape(s);
  // The backprops describe the same convolution.
  const ValueId dy = b.placeholder("dy", {8, 64, 8, 8});
  ConvAttrs bi = strided;
  bi.output_shape = {8, 24, 16, 16};
  const NodeId dx = g.value(b.op(OpKind::Conv2DBackpropInput, {dy, w}, bi)).producer;
  EXPECT_EQ(node_shape(g, dx).dims, s.dims) << describe_shape(node_shape(g, dx));
  ConvAttrs bf = strided;
  bf.output_shape = {64, 24, 3, 3};
  const NodeId dw = g.value(b.op(OpKind::Conv2DBackpropFilter, {x, dy}, bf)).producer;
  EXPECT_EQ(node_shape(g, dw).dims, s.dims) << describe_shape(node_shape(g, dw));
  // MatMul [32, 48] x [48, 80] and its transposed form: M 32, N 80, K 48.
  const ValueId p = b.placeholder("p", {32, 48}), q = b.placeholder("q", {48, 80});
  EXPECT_EQ(node_shape(g, g.value(b.matmul(p, q)).producer).dims,
            (std::array<double, kShapeDims>{1, 32, 80, 48}));
  const ValueId pt = b.placeholder("pt", {48, 32});
  const NodeShape mt = node_shape(g, g.value(b.matmul(pt, q, true, false)).producer);
  EXPECT_EQ(mt.family, ShapeFamily::gemm);
  EXPECT_EQ(mt.dims, (std::array<double, kShapeDims>{1, 32, 80, 48}));
  // An element-wise op: its elements and channels.
  const NodeShape r = node_shape(g, g.value(b.relu(y)).producer);
  EXPECT_EQ(r.family, ShapeFamily::other);
  EXPECT_EQ(r.dims, (std::array<double, kShapeDims>{8 * 64 * 8 * 8, 64, 1}));
}

// Conv shapes over a grid: batch, channels (aligned to 16 or not), map, window, stride.
std::vector<NodeShape> conv_grid() {
  std::vector<NodeShape> shapes;
  for (double n : {4, 8, 16, 32})
    for (double c : {3, 16, 24, 64, 100})
      for (double k : {16, 40, 64, 128})
        for (double map : {16, 64, 256})
          for (double window : {1, 9})
            shapes.push_back({ShapeFamily::conv, {n, c, k, map, window, map > 16 ? 2.0 : 1.0, 1}});
  return shapes;
}

// A law of the ratio by shape: bf16 is 1.6x faster in full blocks, slowed by the padding of C
// and K to 16, and by small maps; the f32 time a roofline of FLOPs.
double law_ratio(const NodeShape& s) {
  auto u16 = [](double x) { return x / (16 * std::ceil(x / 16)); };
  return 0.6 * std::pow(u16(s.dims[1]), -0.8) * std::pow(u16(s.dims[2]), -0.5) *
         std::pow(s.dims[3], -0.05);
}

OpSample conv_sample(const NodeShape& s) {
  OpSample o;
  o.shape = s;
  o.group = int64_t(s.dims[0]);
  const double flops = 2 * s.dims[0] * s.dims[2] * s.dims[3] * s.dims[1] * s.dims[4];
  o.features[size_t(Feature::flops)] = flops;
  o.features[size_t(Feature::bytes)] = 4 * s.dims[0] * (s.dims[1] + s.dims[2]) * s.dims[3];
  o.features[size_t(Feature::intensity)] = flops / o.features[size_t(Feature::bytes)];
  o.features[size_t(Feature::elements)] = s.dims[0] * s.dims[2] * s.dims[3];
  o.features[size_t(Feature::aligned)] =
      std::fmod(s.dims[1], 16) == 0 && std::fmod(s.dims[2], 16) == 0;
  for (int c = kFirstCounterFeature; c < kNumFeatures; ++c)
    o.features[size_t(c)] = std::numeric_limits<double>::quiet_NaN();
  o.fp32_ms = 1e-8 * flops + 0.005;
  o.low_ms = o.fp32_ms * law_ratio(s);
  return o;
}

TEST(ShapeModelTest, ShapeFeaturesRecoverAUtilisationLawTheLinearModelMisses) {
  std::vector<OpSample> train, heldout;
  for (const NodeShape& s : conv_grid())
    (s.dims[0] == 8 ? heldout : train).push_back(conv_sample(s));
  FitComparison c;
  const OpModel m = fit_op_model_by_shape("Conv2D", train, heldout, &c);
  // The law is log-linear in the terms: recovered exactly, and chosen.
  EXPECT_EQ(m.fit, "shape-features");
  ASSERT_TRUE(m.shape);
  EXPECT_LT(m.heldout_mape, 1e-6);
  const std::vector<std::string>& names = shape_term_names(ShapeFamily::conv);
  auto weight = [&](const std::string& term) {
    const size_t i = size_t(std::find(names.begin(), names.end(), term) - names.begin());
    return m.shape->weights.at(i);
  };
  EXPECT_NEAR(weight("1"), std::log(0.6), 1e-6);
  EXPECT_NEAR(weight("ln u16(C)"), -0.8, 1e-6);
  EXPECT_NEAR(weight("ln u16(K)"), -0.5, 1e-6);
  EXPECT_NEAR(weight("ln map"), -0.05, 1e-6);
  // The linear model of FLOPs and bytes cannot see the padding: it is far off on the same
  // held-out samples (had the shape terms been ignored, the new model would be too).
  EXPECT_GT(c.heldout_mape[size_t(FitForm::linear)], 10.0);
  EXPECT_EQ(c.chosen, FitForm::shape_features);
  EXPECT_GT(c.cv_mape[size_t(FitForm::linear)], c.cv_mape[size_t(FitForm::shape_features)]);
}

TEST(ShapeModelTest, TheShapeTableRecoversALawNoLogLinearTermHolds) {
  // The low-precision efficiency (FLOPs per ms) depends on the channels by a table no term
  // fits (1 / 0.4, 1 / 1.3, 1 / 0.7 of f32's at C = 16, 64, 256: not monotone in ln C, every
  // C a multiple of 64 or of 16 alike); the batch sizes of the held-out samples (12) lie
  // between the training ones.
  auto ratio_of = [](double c) { return c == 16 ? 0.4 : c == 64 ? 1.3 : 0.7; };
  std::vector<OpSample> train, heldout;
  for (double n : {4, 8, 12, 16, 32, 64})
    for (double c : {16, 64, 256}) {
      OpSample s = conv_sample({ShapeFamily::conv, {n, c, 64, 64, 9, 1, 1}});
      s.fp32_ms = 1e-8 * s.features[size_t(Feature::flops)];  // f32 at 1e8 FLOPs per ms
      s.low_ms = s.fp32_ms * ratio_of(c);
      (n == 12 ? heldout : train).push_back(s);
    }
  FitComparison c;
  const OpModel m = fit_op_model_by_shape("Conv2D", train, heldout, &c);
  EXPECT_EQ(m.fit, "shape-table");
  EXPECT_EQ(c.chosen, FitForm::shape_table);
  // Its four nearest shapes are the same channels at other batch sizes: exact.
  EXPECT_LT(m.heldout_mape, 1e-9);
  EXPECT_GT(c.heldout_mape[size_t(FitForm::linear)], 10.0);
  for (const OpSample& s : heldout)
    EXPECT_NEAR(m.predict_low_ms(s.features, s.fp32_ms, &s.shape), s.low_ms, 1e-12);
}

TEST(ShapeModelTest, TheLinearModelStaysWhereTheShapeSaysNothingMore) {
  // T_lp = 0.5 T_fp32 exactly: the linear model is exact too, and is kept (a shape fit must
  // do better in cross-validation to replace it).
  std::vector<OpSample> train, heldout;
  for (const NodeShape& s : conv_grid()) {
    OpSample o = conv_sample(s);
    o.low_ms = 0.5 * o.fp32_ms;
    (s.dims[0] == 8 ? heldout : train).push_back(o);
  }
  FitComparison c;
  const OpModel m = fit_op_model_by_shape("Conv2D", train, heldout, &c);
  EXPECT_FALSE(m.is_shape_fit());
  EXPECT_EQ(c.chosen, FitForm::linear);
  EXPECT_LT(m.heldout_mape, 1e-6);
  // Without shapes (a sample of an older dump), only the linear model is fitted.
  for (OpSample& s : train) s.shape = {};
  fit_op_model_by_shape("Conv2D", train, heldout, &c);
  EXPECT_EQ(c.heldout_mape[size_t(FitForm::shape_features)], -1);
  EXPECT_EQ(c.heldout_mape[size_t(FitForm::shape_table)], -1);
}

TEST(ShapeModelTest, ShapeModelsRoundTripThroughTheFileAndPredictFromAGraph) {
  std::vector<OpSample> train, heldout;
  for (const NodeShape& s : conv_grid())
    (s.dims[0] == 8 ? heldout : train).push_back(conv_sample(s));
  Calibration cal = sample_calibration();
  cal.ops["Conv2D"] = fit_op_model_by_shape("Conv2D", train, heldout);
  ASSERT_EQ(cal.ops["Conv2D"].fit, "shape-features");
  std::vector<OpSample> relu;
  for (double n : {1, 2, 3, 4, 5, 6, 7, 8})
    for (double c : {16, 24}) {
      OpSample s;
      s.shape = {ShapeFamily::other, {n * c * 64, c, 1}};
      s.fp32_ms = 1e-6 * s.shape.dims[0];
      s.low_ms = s.fp32_ms * (c == 16 ? 0.5 : 0.9);
      relu.push_back(s);
    }
  OpModel table = fit_op_model_by_shape("Relu", relu, {});
  table.key = "Relu";
  ShapeModel sm;  // the table form whatever the cross-validation says: the format is tested
  std::vector<ShapeSample> shapes;
  for (const OpSample& s : relu) shapes.push_back({s.shape, s.fp32_ms, s.low_ms});
  table.shape = std::make_shared<const ShapeModel>(fit_shape_table(shapes));
  table.fit = "shape-table";
  table.features.clear(), table.rho.clear(), table.weights.clear();
  table.sigma = 1, table.bias = 0, table.analytic = nullptr;
  cal.ops["Relu"] = table;
  TempFile f("shapes.json");
  save_calibration(cal, f.path);
  Calibration back;
  const CalibrationCheck check = read_calibration(f.path, cpu_identity(), back);
  ASSERT_EQ(check.problem, CalibrationProblem::none) << check.message;
  EXPECT_EQ(back.version, kCalibrationVersion);
  ASSERT_TRUE(back.ops.at("Conv2D").shape);
  EXPECT_EQ(back.ops.at("Conv2D").fit, "shape-features");
  EXPECT_EQ(back.ops.at("Conv2D").shape->weights, cal.ops["Conv2D"].shape->weights);
  ASSERT_TRUE(back.ops.at("Relu").shape);
  EXPECT_EQ(back.ops.at("Relu").shape->points, table.shape->points);
  EXPECT_EQ(back.ops.at("Relu").shape->log_efficiencies, table.shape->log_efficiencies);

  // predict_costs describes each node's shape from the graph: a [4, 24, 16, 16] x [40, 24, 3,
  // 3] convolution is predicted by the law (T_fp32 1 ms).
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {4, 24, 16, 16});
  const ValueId w = b.placeholder("w", {40, 24, 3, 3});
  ConvAttrs same;
  same.pad_h = same.pad_w = 1;
  const ValueId y = b.conv2d(x, w, same);
  const NodeId conv = g.value(y).producer;
  std::vector<double> fp32(size_t(g.num_nodes()), 0.0);
  fp32[size_t(conv)] = 1.0;
  const CostTable costs =
      predict_costs(g, fp32, back, AmpLists::defaults(Device::cpu, DType::bf16));
  const NodeShape s{ShapeFamily::conv, {4, 24, 40, 256, 9, 1, 1}};
  EXPECT_NEAR(costs.nodes[size_t(conv)].low_ms, law_ratio(s), 1e-6 * law_ratio(s));
}

TEST(ShapeModelTest, ImplausibleShapeModelsAreRefusedNamingTheField) {
  std::vector<OpSample> train;
  for (const NodeShape& s : conv_grid()) train.push_back(conv_sample(s));
  Calibration cal = sample_calibration();
  cal.ops["Conv2D"] = fit_op_model_by_shape("Conv2D", train, {});
  ASSERT_EQ(cal.ops["Conv2D"].fit, "shape-features");
  TempFile f("bad_shapes.json");
  save_calibration(cal, f.path);
  std::ifstream in(f.path);
  const nlohmann::json good = nlohmann::json::parse(in);
  auto conv_of = [](nlohmann::json& j) -> nlohmann::json& {
    for (nlohmann::json& o : j["ops"])
      if (o["key"] == "Conv2D") return o;
    throw std::runtime_error("no Conv2D");
  };
  auto refused_with = [&](nlohmann::json j, const std::string& needle) {
    std::ofstream(f.path) << j.dump();
    Calibration out;
    const CalibrationCheck c = read_calibration(f.path, cpu_identity(), out);
    EXPECT_EQ(c.problem, CalibrationProblem::corrupt) << needle;
    EXPECT_NE(c.message.find(needle), std::string::npos) << c.message;
  };
  nlohmann::json j = good;
  conv_of(j)["shape"]["terms"][3]["name"] = "ln D";
  refused_with(j, "terms[3]' is not 'ln C'");
  j = good;
  conv_of(j)["shape"]["family"] = "gemm";
  refused_with(j, "not a list of the 12 terms of a gemm shape");
  j = good;
  conv_of(j).erase("shape");
  refused_with(j, "is a 'shape-features' fit without its shape model");
  j = good;
  conv_of(j)["shape"] = {{"family", "conv"}, {"form", "table"}, {"points", {{1, 2, 0.5}}}};
  conv_of(j)["fit"] = "shape-table";
  refused_with(j, "has 2 coordinates, not 7");
  j = good;
  j["version"] = kCalibrationVersion + 1;
  std::ofstream(f.path) << j.dump();
  Calibration out;
  EXPECT_EQ(read_calibration(f.path, cpu_identity(), out).problem, CalibrationProblem::stale);
}

TEST(ShapeModelTest, TheCommittedCalibrationOfTheFormerFormatStillLoadsAndPredicts) {
  // tests/amp/data/zen4-2core-bf16-format1.json, the committed calibration before it was
  // remade in format 2, is a version 1 file: no shape fits. It loads (against its own machine
  // and campo) and predicts every model as before.
  const fs::path source = fs::path(CAMPO_BINARY).parent_path() / __FILE__;
  const fs::path file = source.parent_path() / "data" / "zen4-2core-bf16-format1.json";
  Calibration own;
  const CalibrationCheck parsed = read_calibration_file(file.string(), "cpu", own);
  ASSERT_EQ(parsed.problem, CalibrationProblem::none) << parsed.message;
  Calibration cal;
  const CalibrationCheck check =
      read_calibration(file.string(), own.machine, cal, own.campo_version);
  ASSERT_EQ(check.problem, CalibrationProblem::none) << check.message;
  ASSERT_EQ(cal.version, 1);
  ASSERT_TRUE(cal.ops.count("Conv2D"));
  for (const auto& [key, m] : cal.ops) EXPECT_FALSE(m.is_shape_fit()) << key;
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {4, 16, 16, 16});
  const ValueId w = b.placeholder("w", {32, 16, 3, 3});
  const NodeId conv = g.value(b.conv2d(x, w, ConvAttrs{})).producer;
  std::vector<double> fp32(size_t(g.num_nodes()), 0.0);
  fp32[size_t(conv)] = 0.5;
  const CostTable costs = predict_costs(g, fp32, cal, AmpLists::defaults(Device::cpu, DType::bf16));
  const NodeFeatures f = node_features(g, conv, cal.alignment);
  EXPECT_DOUBLE_EQ(costs.nodes[size_t(conv)].low_ms,
                   cal.model_for(OpKind::Conv2D, f)->predict_low_ms(f, 0.5));
  EXPECT_GT(costs.nodes[size_t(conv)].low_ms, 0.0);
}

}  // namespace
}  // namespace campo
