// Calibration of the cost-aware policy: the statistics (least squares, Spearman), feature
// selection and model fits on synthetic data with known answers, node features against
// hand-computed FLOPs, the calibration file (round trip; corrupt, foreign and stale files
// refused) and predicted cost tables (the default lookup, train/profiling.h, is tested in
// tests/train/calibration_lookup_test.cc). No test looks at a timing.
#include "amp/calibration.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "graph/builder.h"
#include "tests/amp/calibration_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;
using testing::cpu_identity;
using testing::sample_calibration;
using testing::TempFile;

TEST(CalibrationStatsTest, LeastSquaresRecoversKnownCoefficients) {
  // y = 2 + 3 x1 - 0.5 x2, exact.
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  Rng rng(1);
  for (int i = 0; i < 20; ++i) {
    const double x1 = rng.uniform(0, 10), x2 = rng.uniform(-5, 5) * 1e6;  // scales differ
    rows.push_back({1.0, x1, x2});
    y.push_back(2 + 3 * x1 - 0.5e-6 * x2);
  }
  std::vector<double> x = least_squares(rows, y);
  ASSERT_EQ(x.size(), 3u);
  EXPECT_NEAR(x[0], 2.0, 1e-9);
  EXPECT_NEAR(x[1], 3.0, 1e-9);
  EXPECT_NEAR(x[2], -0.5e-6, 1e-15);
}

TEST(CalibrationStatsTest, WeightedLeastSquaresIgnoresZeroWeightRowsAndFollowsWeights) {
  // Consistent rows y = 1 + 2 x, plus an outlier: weight 0 removes it exactly.
  std::vector<std::vector<double>> rows = {{1, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}};
  std::vector<double> y = {1, 3, 5, 7, 100};
  std::vector<double> x = least_squares(rows, y, {1, 1, 1, 1, 0});
  EXPECT_NEAR(x[0], 1.0, 1e-9);
  EXPECT_NEAR(x[1], 2.0, 1e-9);
  // A constant fit to {0, 10} with weights 1 and 3 is the weighted mean 7.5.
  x = least_squares({{1.0}, {1.0}}, {0.0, 10.0}, {1.0, 3.0});
  EXPECT_NEAR(x[0], 7.5, 1e-12);
  // Unweighted, the same rows give the plain mean.
  x = least_squares({{1.0}, {1.0}}, {0.0, 10.0});
  EXPECT_NEAR(x[0], 5.0, 1e-12);
}

TEST(CalibrationStatsTest, LeastSquaresDropsADependentColumn) {
  // The third column is twice the second: it gets 0 and the fit stays exact.
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  for (int i = 0; i < 6; ++i) {
    rows.push_back({1.0, double(i), 2.0 * i});
    y.push_back(4 - double(i));
  }
  std::vector<double> x = least_squares(rows, y);
  EXPECT_NEAR(x[0], 4.0, 1e-9);
  EXPECT_NEAR(x[1], -1.0, 1e-9);
  EXPECT_EQ(x[2], 0.0);
}

TEST(CalibrationStatsTest, SpearmanOnKnownRankings) {
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 8, 27, 1000}), 1.0, 1e-12);  // monotone, not linear
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, 1e-12);
  // Ties in b: ranks of b are 1, 2, 3.5, 5, 3.5; sum da db = 8, sum da^2 = 10,
  // sum db^2 = 9.5, rho = 8 / sqrt(95).
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}), 8 / std::sqrt(95.0), 1e-12);
  // Ties on both sides: ranks (1.5, 1.5, 3, 4) and (1, 2.5, 2.5, 4): rho = 3.75 / 4.5.
  EXPECT_NEAR(spearman({1, 1, 2, 3}, {1, 2, 2, 3}), 3.75 / 4.5, 1e-12);
  // No ranking on one side: 0.
  EXPECT_EQ(spearman({1, 2, 3}, {7, 7, 7}), 0.0);
  EXPECT_EQ(spearman({1}, {2}), 0.0);
}

TEST(CalibrationStatsTest, MapeInPercent) {
  EXPECT_NEAR(mape_percent({1.1, 1.8}, {1.0, 2.0}), 10.0, 1e-9);
}

// Samples of T_lp = 0.5 T_fp32 + 2e-9 flops + 0.1, with bytes and elements drawn at random
// (no relation to T_lp) and every node aligned.
std::vector<OpSample> synthetic_samples(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<OpSample> out;
  for (int i = 0; i < n; ++i) {
    OpSample s;
    s.fp32_ms = rng.uniform(1, 2);
    s.features[size_t(Feature::flops)] = rng.uniform(1e8, 1e10);
    s.features[size_t(Feature::bytes)] = rng.uniform(1e3, 1e6);
    s.features[size_t(Feature::elements)] = rng.uniform(1e3, 1e6);
    s.features[size_t(Feature::intensity)] = rng.uniform(1, 2);
    s.features[size_t(Feature::aligned)] = 1;
    s.low_ms = 0.5 * s.fp32_ms + 2e-9 * s.features[size_t(Feature::flops)] + 0.1;
    out.push_back(s);
  }
  return out;
}

TEST(CalibrationModelTest, SelectsCorrelatedFeaturesAndRecoversCoefficients) {
  const std::vector<OpSample> train = synthetic_samples(40, 2), heldout = synthetic_samples(10, 3);
  OpModel m = fit_op_model("Conv2D", train, heldout);
  EXPECT_EQ(m.fit, "features");
  // flops decides T_lp (|rho| near 1); bytes, elements and intensity are noise
  // (|rho| < 0.75) and the constant `aligned` has no ranking: all dropped.
  ASSERT_EQ(m.features.size(), 1u);
  EXPECT_EQ(m.features[0], Feature::flops);
  EXPECT_GT(m.rho[0], 0.75);
  EXPECT_NEAR(m.weights[0], 2e-9, 1e-15);
  EXPECT_NEAR(m.sigma, 0.5, 1e-6);
  EXPECT_NEAR(m.bias, 0.1, 1e-6);
  EXPECT_EQ(m.train_samples, 40);
  EXPECT_EQ(m.heldout_samples, 10);
  EXPECT_NEAR(m.heldout_mape, 0.0, 1e-6);
  EXPECT_NEAR(m.predict_low_ms(heldout[0].features, heldout[0].fp32_ms), heldout[0].low_ms, 1e-9);
}

TEST(CalibrationModelTest, FallsBackWithFewSamples) {
  // Five samples: too few for features (needs >= 8): sigma and bias. (Their low time is
  // mostly flops, which sigma and bias cannot follow: the fitted intercept must still be
  // plausible, else it is the ratio.)
  OpModel m = fit_op_model("Relu", synthetic_samples(5, 4), {});
  EXPECT_TRUE(m.fit == "sigma+bias" || m.fit == "ratio") << m.fit;
  EXPECT_GE(m.bias, kMinOpModelBiasMs);
  std::vector<OpSample> line(5);
  for (size_t i = 0; i < line.size(); ++i) {
    line[i].fp32_ms = 1.0 + double(i);
    line[i].low_ms = 0.5 * line[i].fp32_ms + 0.1;
  }
  m = fit_op_model("Relu", line, {});
  EXPECT_EQ(m.fit, "sigma+bias");
  EXPECT_NEAR(m.sigma, 0.5, 1e-9);
  EXPECT_NEAR(m.bias, 0.1, 1e-9);
  EXPECT_TRUE(m.features.empty());
  EXPECT_EQ(m.heldout_mape, -1);
  // Two samples of T_lp = 0.25 T_fp32: the ratio, exactly.
  std::vector<OpSample> two(2);
  two[0].fp32_ms = 2;
  two[0].low_ms = 0.5;
  two[1].fp32_ms = 8;
  two[1].low_ms = 2;
  m = fit_op_model("Relu", two, {});
  EXPECT_EQ(m.fit, "ratio");
  EXPECT_NEAR(m.sigma, 0.25, 1e-12);
  EXPECT_EQ(m.bias, 0.0);
  // Timings whose straight line has an intercept of -5 ms (noise on a loaded machine can
  // fit that): the sigma+bias fit would predict 0 ms for every op under 2.5 ms, and a file
  // holding it would be refused on load, so the ratio is fitted instead.
  std::vector<OpSample> steep(6);
  for (size_t i = 0; i < steep.size(); ++i) {
    steep[i].fp32_ms = 3.0 + double(i);
    steep[i].low_ms = 2 * steep[i].fp32_ms - 5;
  }
  m = fit_op_model("Relu", steep, {});
  EXPECT_EQ(m.fit, "ratio");
  EXPECT_GT(m.sigma, 0);
  EXPECT_EQ(m.bias, 0.0);
  // Predictions never go below zero.
  OpModel negative;
  negative.sigma = 1;
  negative.bias = -5;
  EXPECT_EQ(negative.predict_low_ms({}, 1.0), 0.0);
}

TEST(CalibrationModelTest, CastFitOnRelativeError) {
  std::vector<std::pair<int64_t, double>> samples;
  for (int64_t n : {1 << 10, 1 << 14, 1 << 18, 1 << 22})
    samples.push_back({n, 0.002 + 1e-7 * double(n)});
  CastFit f = fit_cast_relative(samples);
  EXPECT_EQ(f.samples, 4);
  EXPECT_NEAR(f.model.fixed_ms, 0.002, 1e-9);
  EXPECT_NEAR(f.model.per_element_ms, 1e-7, 1e-13);
  EXPECT_NEAR(f.mape, 0.0, 1e-6);
  EXPECT_EQ(fit_cast_relative({{10, 1.0}}).samples, 0);  // one size: no fit
  // Noisy timings where the larger cast ran faster: no negative per-element cost (a
  // calibration file holding one is refused on load), the proportional fit instead.
  CastFit noisy = fit_cast_relative({{1000, 0.5}, {2000, 0.4}, {4000, 0.45}});
  EXPECT_EQ(noisy.samples, 3);
  EXPECT_EQ(noisy.model.fixed_ms, 0.0);
  EXPECT_GT(noisy.model.per_element_ms, 0.0);
}

TEST(CalibrationFeaturesTest, ConvAndMatMulFlopsAreExact) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  // Conv2D x [2, 3, 8, 8], w [16, 3, 3, 3], stride 1, pad 1 -> y [2, 16, 8, 8].
  ValueId x = b.placeholder("x", {2, 3, 8, 8});
  ValueId w = b.variable("w", {16, 3, 3, 3}, Init::ones());
  ConvAttrs a;
  a.pad_h = a.pad_w = 1;
  ValueId y = b.conv2d(x, w, a);
  // 2 * N*K*Ho*Wo * C*R*S = 2 * (2*16*8*8) * 27
  NodeFeatures f = node_features(g, g.value(y).producer, 16);
  EXPECT_EQ(f[size_t(Feature::flops)], 2.0 * 2048 * 27);
  EXPECT_EQ(f[size_t(Feature::elements)], 2048);
  // bytes: x 384, w 432, y 2048 elements at 4 bytes
  EXPECT_EQ(f[size_t(Feature::bytes)], 4.0 * (384 + 432 + 2048));
  EXPECT_NEAR(f[size_t(Feature::intensity)], 2.0 * 2048 * 27 / (4.0 * (384 + 432 + 2048)), 1e-12);
  EXPECT_EQ(f[size_t(Feature::aligned)], 0);  // 3 input channels

  // The backprops of the same convolution count the same FLOPs.
  ConvAttrs bi = a;
  bi.output_shape = {2, 3, 8, 8};
  ValueId dx = b.op(OpKind::Conv2DBackpropInput, {y, w}, bi);
  EXPECT_EQ(node_features(g, g.value(dx).producer, 16)[size_t(Feature::flops)], 2.0 * 2048 * 27);
  ConvAttrs bf = a;
  bf.output_shape = {16, 3, 3, 3};
  ValueId dw = b.op(OpKind::Conv2DBackpropFilter, {x, y}, bf);
  EXPECT_EQ(node_features(g, g.value(dw).producer, 16)[size_t(Feature::flops)], 2.0 * 2048 * 27);

  // 32 -> 16 channels: aligned.
  ValueId x2 = b.placeholder("x2", {1, 32, 4, 4});
  ValueId w2 = b.variable("w2", {16, 32, 1, 1}, Init::ones());
  EXPECT_EQ(node_features(g, g.value(b.conv2d(x2, w2, ConvAttrs{})).producer,
                          16)[size_t(Feature::aligned)],
            1);

  // MatMul [4, 32] x [32, 16]: 2 M N K = 2 * 4 * 16 * 32; M = 4 is not a multiple of 16.
  ValueId p = b.placeholder("p", {4, 32});
  ValueId q = b.variable("q", {32, 16}, Init::ones());
  NodeFeatures m = node_features(g, g.value(b.matmul(p, q)).producer, 16);
  EXPECT_EQ(m[size_t(Feature::flops)], 2.0 * 4 * 16 * 32);
  EXPECT_EQ(m[size_t(Feature::aligned)], 0);
  // Transposed A [32, 16]^T x B [32, 16]: M = 16, K = 32, N = 16: aligned.
  ValueId at = b.placeholder("at", {32, 16});
  NodeFeatures mt = node_features(g, g.value(b.matmul(at, q, true, false)).producer, 16);
  EXPECT_EQ(mt[size_t(Feature::flops)], 2.0 * 16 * 16 * 32);
  EXPECT_EQ(mt[size_t(Feature::aligned)], 1);

  // BatchMatMulV2 [2, 3, 16, 8]^T x [2, 3, 16, 32]: B = 6, M = 8, K = 16, N = 32 (M = 8 not
  // a multiple of 16); q k^T of [2, 3, 16, 32] twice: M = N = 16, K = 32, aligned.
  ValueId bx = b.placeholder("bx", {2, 3, 16, 8}), by = b.placeholder("by", {2, 3, 16, 32});
  NodeFeatures bm = node_features(g, g.value(b.batch_matmul(bx, by, true, false)).producer, 16);
  EXPECT_EQ(bm[size_t(Feature::flops)], 2.0 * 6 * 8 * 32 * 16);
  EXPECT_EQ(bm[size_t(Feature::aligned)], 0);
  // The block is the device's: with CUDA's 8, M = 8 is aligned; 3 channels never are.
  EXPECT_EQ(node_features(g, g.value(b.batch_matmul(bx, by, true, false)).producer,
                          8)[size_t(Feature::aligned)],
            1);
  EXPECT_EQ(node_features(g, g.value(y).producer, 8)[size_t(Feature::aligned)], 0);
  NodeFeatures bq = node_features(g, g.value(b.batch_matmul(by, by, false, true)).producer, 16);
  EXPECT_EQ(bq[size_t(Feature::flops)], 2.0 * 6 * 16 * 16 * 32);
  EXPECT_EQ(bq[size_t(Feature::aligned)], 1);

  // Element-wise: one per element.
  NodeFeatures r = node_features(g, g.value(b.relu(y)).producer, 16);
  EXPECT_EQ(r[size_t(Feature::flops)], 2048);
  EXPECT_EQ(r[size_t(Feature::aligned)], 1);  // 16 channels
}

// An embedding lookup reads only the rows it gathers: a 1000-row table costs what a 10-row
// one does. Its gradient writes the whole table's shape.
TEST(CalibrationFeaturesTest, GatherCountsTheRowsItCopiesNotTheTable) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId ids = b.placeholder("ids", {2, 3}, DType::i32);
  ValueId table = b.variable("table", {1000, 16}, Init::ones());
  ValueId y = b.gather(table, ids);  // [2, 3, 16]: 96 elements
  NodeFeatures f = node_features(g, g.value(y).producer, 16);
  EXPECT_EQ(f[size_t(Feature::bytes)], 4.0 * (6 + 2 * 96));
  EXPECT_EQ(f[size_t(Feature::flops)], 96);
  EXPECT_EQ(f[size_t(Feature::elements)], 96);
  ValueId small = b.variable("small", {10, 16}, Init::ones());
  const NodeFeatures smaller = node_features(g, g.value(b.gather(small, ids)).producer, 16);
  for (int i = 0; i < kFirstCounterFeature; ++i)  // the counters are unread (NaN) in both
    EXPECT_EQ(smaller[size_t(i)], f[size_t(i)]) << feature_name(Feature(i));

  ValueId s = b.unsorted_segment_sum(y, ids, 1000);  // [1000, 16]
  NodeFeatures fs = node_features(g, g.value(s).producer, 16);
  EXPECT_EQ(fs[size_t(Feature::bytes)], 4.0 * (96 + 6 + 16000));
  EXPECT_EQ(fs[size_t(Feature::flops)], 96 + 16000);
  EXPECT_EQ(fs[size_t(Feature::elements)], 16000);
}

TEST(CalibrationFileTest, RoundTrip) {
  TempFile f("round_trip.json");
  const Calibration cal = sample_calibration();
  save_calibration(cal, f.path);
  const Calibration back = load_calibration(f.path, *default_cpu_backend());
  EXPECT_EQ(back.version, kCalibrationVersion);
  EXPECT_EQ(back.campo_version, CAMPO_VERSION);
  EXPECT_EQ(back.machine.kind, "cpu");
  ASSERT_EQ(back.machine.fields.size(), cal.machine.fields.size());
  for (size_t i = 0; i < cal.machine.fields.size(); ++i) {
    EXPECT_EQ(back.machine.fields[i].name, cal.machine.fields[i].name);
    EXPECT_EQ(back.machine.fields[i].value, cal.machine.fields[i].value);
    EXPECT_EQ(back.machine.fields[i].is_version, cal.machine.fields[i].is_version);
  }
  EXPECT_EQ(back.low, DType::bf16);
  EXPECT_EQ(back.created, cal.created);
  EXPECT_EQ(back.cast.fixed_ms, 0.01);
  EXPECT_EQ(back.cast.per_element_ms, 1e-6);
  EXPECT_EQ(back.cast_to_low.samples, 15);
  EXPECT_EQ(back.cast_to_f32.model.fixed_ms, 0.009);
  ASSERT_EQ(back.ops.size(), 3u);
  const OpModel& mm = back.ops.at("MatMul");
  ASSERT_EQ(mm.features.size(), 1u);
  EXPECT_EQ(mm.features[0], Feature::flops);
  EXPECT_EQ(mm.weights[0], 1e-9);
  EXPECT_EQ(mm.rho[0], 0.9);
  EXPECT_EQ(mm.sigma, 0.5);
  EXPECT_EQ(mm.heldout_mape, 7.5);
  EXPECT_EQ(back.ops.at("Relu").fit, "ratio");
  EXPECT_EQ(back.ops.at("MatMul:unaligned").sigma, 2.0);
  EXPECT_EQ(back.configurations, 8);
  EXPECT_EQ(back.alignment, 16);
}

// Loading the file fails with one line naming the file and how to recalibrate.
void expect_refused(const std::string& path, const std::string& needle) {
  try {
    load_calibration(path, *default_cpu_backend());
    FAIL() << "loaded " << path << " (expected: " << needle << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("recalibrate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("campo calibrate --device cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(CalibrationFileTest, CorruptFilesAreRefused) {
  TempFile f("corrupt.json");
  f.write("{\"format\": \"campo-calibration\", \"version\": 1, ");
  expect_refused(f.path, "corrupt");
  f.write("not json at all");
  expect_refused(f.path, "corrupt");

  save_calibration(sample_calibration(), f.path);
  nlohmann::json j = f.read();
  j.erase("cast");
  f.write(j.dump());
  expect_refused(f.path, "missing field 'file.cast'");

  save_calibration(sample_calibration(), f.path);
  j = f.read();
  j["ops"][0]["sigma"] = "fast";
  f.write(j.dump());
  expect_refused(f.path, "is not a number");

  // NaN is not JSON; written as a bare token it is a parse error, as null (what JSON
  // writers make of it) an ill-typed field.
  save_calibration(sample_calibration(), f.path);
  std::string text = f.read().dump();
  const std::string sigma = "\"sigma\":0.5";
  ASSERT_NE(text.find(sigma), std::string::npos);
  f.write(std::string(text).replace(text.find(sigma), sigma.size(), "\"sigma\":NaN"));
  expect_refused(f.path, "corrupt");
  f.write(std::string(text).replace(text.find(sigma), sigma.size(), "\"sigma\":null"));
  expect_refused(f.path, "is not a number");
  // Too large for a double: parsed as infinity.
  f.write(std::string(text).replace(text.find(sigma), sigma.size(), "\"sigma\":1e999"));
  expect_refused(f.path, "corrupt");

  expect_refused(f.path + ".absent", "no such file");
}

// The `aligned` feature's block travels with the file: a calibration made where it is 8
// (CUDA) predicts with 8; a file written before the field was a CPU's, so 16; a block that
// no device has is refused.
TEST(CalibrationFileTest, TheAlignmentOfTheMeasuringDeviceIsKept) {
  TempFile f("alignment.json");
  Calibration cal = sample_calibration();
  cal.alignment = 8;
  save_calibration(cal, f.path);
  EXPECT_EQ(f.read()["alignment"], 8);
  EXPECT_EQ(load_calibration(f.path, *default_cpu_backend()).alignment, 8);
  nlohmann::json j = f.read();
  j.erase("alignment");
  f.write(j.dump());
  EXPECT_EQ(load_calibration(f.path, *default_cpu_backend()).alignment, 16);
  for (int bad : {0, -8, 4096}) {
    j["alignment"] = bad;
    f.write(j.dump());
    expect_refused(f.path, "implausible alignment = " + std::to_string(bad));
  }
  j["alignment"] = "eight";
  f.write(j.dump());
  expect_refused(f.path, "'file.alignment' is not an integer");
}

TEST(CalibrationFileTest, AFifoOrAFolderIsRefusedWithoutReading) {
  // Opening a FIFO for reading would block until a writer comes.
  TempFile fifo("fifo.json");
  ASSERT_EQ(::mkfifo(fifo.path.c_str(), 0600), 0);
  expect_refused(fifo.path, "is a FIFO, not a regular file");
  Calibration out;
  EXPECT_EQ(read_calibration(fifo.path, cpu_identity(), out).problem, CalibrationProblem::missing);
  const std::string dir = fs::temp_directory_path().string();
  expect_refused(dir, "is a directory, not a regular file");
}

// Writes the sample calibration with one field of its JSON changed by `edit`, and expects
// loading it to fail naming the file and `needle`.
template <typename Edit>
void expect_edit_refused(const TempFile& f, Edit edit, const std::string& needle) {
  save_calibration(sample_calibration(), f.path);
  nlohmann::json j = f.read();
  edit(j);
  f.write(j.dump());
  expect_refused(f.path, needle);
}

// The sample's ops in the file are sorted by key: MatMul, MatMul:unaligned, Relu.
TEST(CalibrationFileTest, PhysicallyImpossibleModelsAreRefused) {
  TempFile f("implausible.json");
  using nlohmann::json;
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["sigma"] = -0.5; }, "implausible ops[MatMul].sigma = -0.5");
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["sigma"] = 0; }, "implausible ops[MatMul].sigma = 0");
  expect_edit_refused(
      f, [](json& j) { j["ops"][1]["bias_ms"] = -5; },
      "implausible ops[MatMul:unaligned].bias_ms = -5: it would predict 0 ms");
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["bias_ms"] = 1e300; },
      "implausible ops[MatMul].bias_ms = 1e+300");
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["features"][0]["weight"] = -1e30; },
      "implausible ops[MatMul].features[flops].weight = -1e+30");
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["features"][0]["rho"] = 3; },
      "implausible ops[MatMul].features[flops].rho = 3");
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["heldout_mape"] = -7; },
      "implausible ops[MatMul].heldout_mape = -7");
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["train_samples"] = -1; },
      "implausible sample counts in ops[MatMul]");
  expect_edit_refused(
      f, [](json& j) { j["ops"][2]["bias_ms"] = 0.5; },
      "ops[Relu] is a 'ratio' fit but has a bias");
  expect_edit_refused(
      f, [](json& j) { j["ops"][2]["fit"] = "guess"; }, "unknown fit 'guess' in ops[Relu]");
  expect_edit_refused(
      f, [](json& j) { j["ops"][2]["key"] = "Relu:fast"; }, "unknown model key 'Relu:fast'");
  expect_edit_refused(
      f, [](json& j) { j["ops"][1]["key"] = "MatMul"; }, "two models for 'MatMul'");
  expect_edit_refused(
      f, [](json& j) { j["ops"][0]["features"].push_back(j["ops"][0]["features"][0]); },
      "ops[MatMul].features[flops] is listed twice");
  expect_edit_refused(
      f, [](json& j) { j["cast"]["fixed_ms"] = -0.01; }, "implausible cast.fixed_ms = -0.01");
  expect_edit_refused(
      f, [](json& j) { j["cast"]["per_element_ms"] = -1e-6; },
      "implausible cast.per_element_ms = -1e-06");
  expect_edit_refused(
      f, [](json& j) { j["cast_fits"]["to_low"]["per_element_ms"] = -1e-6; },
      "implausible cast_fits.to_low.per_element_ms");
  expect_edit_refused(
      f, [](json& j) { j["cast_fits"]["to_f32"]["fixed_ms"] = -50; },
      "implausible cast_fits.to_f32.fixed_ms = -50");
  expect_edit_refused(
      f, [](json& j) { j["seconds"] = -1; }, "implausible seconds = -1");
}

TEST(CalibrationFileTest, IllTypedFieldsNameTheFieldNotTheParser) {
  TempFile f("ill_typed.json");
  using nlohmann::json;
  auto no_parser_text = [&](auto edit, const std::string& needle) {
    expect_edit_refused(f, edit, needle);
    try {
      load_calibration(f.path, *default_cpu_backend());
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
    }
  };
  no_parser_text([](json& j) { j["ops"][0]["train_samples"] = "many"; },
                 "'ops[MatMul].train_samples' is not an integer");
  no_parser_text([](json& j) { j["ops"][0]["train_samples"] = int64_t(1) << 40; },
                 "'ops[MatMul].train_samples' is out of range");
  no_parser_text([](json& j) { j["version"] = uint64_t(1) << 63; },
                 "'file.version' is out of range");
  no_parser_text([](json& j) { j["ops"][0]["features"] = "flops"; },
                 "'ops[MatMul].features' is not a list");
  no_parser_text([](json& j) { j["ops"] = json::array({5}); }, "ops[] is not an object");
  no_parser_text([](json& j) { j["ops"][0]["key"] = 7; }, "'ops[].key' is not a string");
  no_parser_text([](json& j) { j["machine"] = json::array(); }, "machine is not an object");
  no_parser_text([](json& j) { j["ops"][0].erase("bias_ms"); },
                 "missing field 'ops[MatMul].bias_ms'");
  no_parser_text([](json& j) { j["cast"]["fixed_ms"] = true; }, "'cast.fixed_ms' is not a number");
}

TEST(CalibrationFileTest, TheRepositoryCalibrationsArePlausible) {
  // Every file in calibration/ passes the checks (read against its own machine).
  // __FILE__ may be relative to the build directory, where the campo binary lies.
  const fs::path source = fs::path(CAMPO_BINARY).parent_path() / __FILE__;
  const fs::path dir = source.parent_path().parent_path().parent_path() / "calibration";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    // The file's own identity and campo version, as it states them.
    Calibration own;
    const CalibrationCheck parsed = read_calibration_file(e.path().string(), "cpu", own);
    ASSERT_EQ(parsed.problem, CalibrationProblem::none) << parsed.message;
    Calibration cal;
    const CalibrationCheck check =
        read_calibration(e.path().string(), own.machine, cal, own.campo_version);
    EXPECT_EQ(check.problem, CalibrationProblem::none) << check.message;
    ++files;
  }
  EXPECT_GT(files, 0);
}

TEST(CalibrationFileTest, AnImplausibleFitIsNotWritten) {
  TempFile f("unwritten.json");
  Calibration cal = sample_calibration();
  cal.ops["MatMul"].sigma = -1;
  try {
    save_calibration(cal, f.path);
    FAIL() << "saved an implausible calibration";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not written: implausible ops[MatMul].sigma = -1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(f.path));
}

// Loading fails with `message` exactly after "calibration file <path> " (one line, the
// advice to recalibrate after it).
void expect_refused_with(const std::string& path, const std::string& message) {
  try {
    load_calibration(path, *default_cpu_backend());
    FAIL() << "loaded " << path << " (expected: " << message << ")";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "calibration file " + path + " " + message +
                                         "; run `campo calibrate --device cpu` to recalibrate");
  }
}

TEST(CalibrationFileTest, ForeignAndStaleFilesAreRefusedNamingTheFieldAndBothValues) {
  TempFile f("foreign.json");
  save_calibration(sample_calibration(), f.path);
  const nlohmann::json good = f.read();
  const BackendIdentity here = cpu_identity();
  auto value = [&](const std::string& name) { return here.find(name)->value; };

  nlohmann::json j = good;
  j["machine"]["cpu_model"] = "Imaginary CPU 9000";
  f.write(j.dump());
  expect_refused_with(f.path,
                      "was made on another machine (cpu_model 'Imaginary CPU 9000' in "
                      "the file, '" +
                          value("cpu_model") + "' here)");
  j = good;
  j["machine"]["logical_cores"] = "999";
  f.write(j.dump());
  expect_refused_with(f.path, "was made on another machine (logical_cores '999' in the file, '" +
                                  value("logical_cores") + "' here)");
  j = good;
  const bool native = value("native_bf16") == "true";
  j["machine"]["native_bf16"] = native ? "false" : "true";
  f.write(j.dump());
  expect_refused_with(f.path, std::string("was made on another machine (native_bf16 '") +
                                  (native ? "false" : "true") + "' in the file, '" +
                                  value("native_bf16") + "' here, set by CAMPO_CPU_BF16)");
  // A field only one side has: another machine too.
  j = good;
  j["machine"].erase("onednn_isa");
  f.write(j.dump());
  expect_refused_with(f.path, "was made on another machine (onednn_isa none in the file, '" +
                                  value("onednn_isa") + "' here)");
  j = good;
  j["machine"]["gpu"] = "NVIDIA H100";
  f.write(j.dump());
  expect_refused_with(f.path,
                      "was made on another machine (gpu 'NVIDIA H100' in the file, none here)");
  j = good;
  j["device"] = "cuda";
  f.write(j.dump());
  expect_refused_with(f.path, "was made for device cuda, not cpu");

  j = good;
  j["version"] = 0;
  f.write(j.dump());
  expect_refused(f.path, "stale");
  j = good;
  j["campo_version"] = "0.0.1";
  f.write(j.dump());
  expect_refused_with(f.path, "is stale (made by campo 0.0.1, this is campo " CAMPO_VERSION ")");
  j = good;
  j["machine"]["onednn_version"] = "1.0.0";
  f.write(j.dump());
  expect_refused_with(f.path, "is stale (made with onednn_version '1.0.0', this run has '" +
                                  value("onednn_version") + "')");

  // read_calibration says which problem it was.
  Calibration out;
  j = good;
  j["machine"]["cpu_model"] = "Imaginary CPU 9000";
  f.write(j.dump());
  EXPECT_EQ(read_calibration(f.path, here, out).problem, CalibrationProblem::foreign);
  j = good;
  j["version"] = 0;
  f.write(j.dump());
  EXPECT_EQ(read_calibration(f.path, here, out).problem, CalibrationProblem::stale);
}

// The comparison knows no device: a GPU's identity (as runtime/cuda/cuda_backend.cc states
// it) against files of the same GPU with another driver (stale) and of another GPU (foreign).
TEST(CalibrationFileTest, AnyBackendsIdentityIsComparedFieldByField) {
  BackendIdentity gpu;
  gpu.kind = "cuda";
  gpu.fields = {{"gpu", "NVIDIA H100 80GB HBM3"},
                {"compute_capability", "9.0"},
                {"multiprocessors", "132"},
                {"driver", "13.0", true},
                {"cudnn", "9.14.0", true}};
  Calibration cal = sample_calibration();
  cal.machine = gpu;
  cal.low = DType::f16;
  TempFile f("gpu.json");
  save_calibration(cal, f.path);
  Calibration out;
  CalibrationCheck check = read_calibration(f.path, gpu, out);
  ASSERT_EQ(check.problem, CalibrationProblem::none) << check.message;
  EXPECT_EQ(out.machine.kind, "cuda");
  EXPECT_EQ(out.machine.find("gpu")->value, "NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(out.machine.find("driver")->is_version);
  EXPECT_EQ(out.low, DType::f16);

  BackendIdentity newer_driver = gpu;
  newer_driver.fields[3].value = "13.1";
  check = read_calibration(f.path, newer_driver, out);
  EXPECT_EQ(check.problem, CalibrationProblem::stale);
  EXPECT_NE(check.message.find("is stale (made with driver '13.0', this run has '13.1')"),
            std::string::npos)
      << check.message;
  EXPECT_NE(check.message.find("run `campo calibrate --device cuda` to recalibrate"),
            std::string::npos)
      << check.message;

  BackendIdentity mig = gpu;
  mig.fields[2].value = "16";
  check = read_calibration(f.path, mig, out);
  EXPECT_EQ(check.problem, CalibrationProblem::foreign);
  EXPECT_NE(check.message.find("(multiprocessors '132' in the file, '16' here)"), std::string::npos)
      << check.message;

  // The cache file's name: the same across driver versions, another for another GPU.
  EXPECT_EQ(gpu.hardware_hash(), newer_driver.hardware_hash());
  EXPECT_NE(gpu.hardware_hash(), mig.hardware_hash());
  EXPECT_EQ(gpu.hardware_hash().size(), 16u);
}

// A file written before BackendIdentity (campo 0.3.0's format: the campo version inside
// `machine`, logical_cores a number and native_bf16 a boolean) still loads on the machine it
// was made on, and is still refused on another.
TEST(CalibrationFileTest, AFileOfTheFormatBeforeBackendIdentityStillLoads) {
  TempFile f("old_format.json");
  save_calibration(sample_calibration(), f.path);
  nlohmann::json j = f.read();
  const BackendIdentity here = cpu_identity();
  j.erase("campo_version");
  j["machine"] = {{"cpu_model", here.find("cpu_model")->value},
                  {"logical_cores", std::stoi(here.find("logical_cores")->value)},
                  {"onednn_isa", here.find("onednn_isa")->value},
                  {"onednn_version", here.find("onednn_version")->value},
                  {"native_bf16", here.find("native_bf16")->value == "true"},
                  {"campo_version", CAMPO_VERSION},
                  {"hash", "b9d0cc2ae5d6cec8"}};
  f.write(j.dump(1));
  // (No native_f16 in the file: made before campo recorded it, so without native f16.)
  if (here.find("native_f16")->value == "false") {
    const Calibration back = load_calibration(f.path, *default_cpu_backend());
    EXPECT_EQ(back.campo_version, CAMPO_VERSION);
    EXPECT_EQ(back.ops.size(), 3u);
  } else {
    expect_refused(f.path, "(native_f16 none in the file, 'true' here");
  }

  j["machine"]["logical_cores"] = std::stoi(here.find("logical_cores")->value) + 1;
  f.write(j.dump(1));
  expect_refused(f.path, "(logical_cores '" +
                             std::to_string(std::stoi(here.find("logical_cores")->value) + 1) +
                             "' in the file");
  j["machine"]["logical_cores"] = 2.5;  // neither text, an integer nor a boolean
  f.write(j.dump(1));
  expect_refused(f.path, "'machine.logical_cores' is not a string, an integer or true / false");
}

TEST(CalibrationPredictTest, PredictsListedNodesWithAModel) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {4, 32});
  ValueId w = b.variable("w", {32, 16}, Init::ones());
  ValueId m = b.matmul(x, w);  // M = 4: unaligned
  ValueId x16 = b.placeholder("x16", {16, 32});
  ValueId m16 = b.matmul(x16, w);  // aligned
  ValueId added = b.add(m, m);
  ValueId r = b.relu(added);
  ValueId s = b.sum(b.add(r, r));
  const NodeId mm = g.value(m).producer, mm16 = g.value(m16).producer;
  const NodeId relu = g.value(r).producer, sum = g.value(s).producer;
  std::vector<double> fp32(size_t(g.num_nodes()), 1.0);
  for (NodeId id = 0; id < g.num_nodes(); ++id)  // leaves do not run
    if (g.node(id).kind == OpKind::Placeholder || g.node(id).kind == OpKind::Variable)
      fp32[size_t(id)] = 0.0;
  const Calibration cal = sample_calibration();
  const CostTable t = predict_costs(g, fp32, cal, AmpLists::defaults(Device::cpu, DType::bf16));
  ASSERT_EQ(t.nodes.size(), size_t(g.num_nodes()));
  // Unaligned MatMul: its own model, 2 * T_fp32.
  EXPECT_DOUBLE_EQ(t.nodes[size_t(mm)].low_ms, 2.0);
  // Aligned MatMul: 0.5 T_fp32 + 1e-9 flops (2 * 16 * 16 * 32).
  EXPECT_DOUBLE_EQ(t.nodes[size_t(mm16)].low_ms, 0.5 + 1e-9 * 2 * 16 * 16 * 32);
  EXPECT_DOUBLE_EQ(t.nodes[size_t(relu)].low_ms, 0.8);
  // Add (infer list) has no model: its f32 time; Sum (deny list) too.
  EXPECT_DOUBLE_EQ(t.nodes[size_t(g.value(added).producer)].low_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.nodes[size_t(sum)].low_ms, 1.0);
  for (const NodeCost& c : t.nodes) EXPECT_GE(c.low_ms, 0.0);
  EXPECT_EQ(t.nodes[0].low_ms, 0.0);
  // One cast model per direction, from the calibration's separate fits.
  EXPECT_EQ(t.cast.fixed_ms, 0.011);
  EXPECT_EQ(t.cast.per_element_ms, 1.1e-6);
  ASSERT_TRUE(t.cast_to_f32.has_value());
  EXPECT_EQ(t.cast_to_f32->fixed_ms, 0.009);
  EXPECT_EQ(t.cast_to_f32->per_element_ms, 0.9e-6);
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    EXPECT_EQ(t.nodes[size_t(id)].fp32_ms, fp32[size_t(id)]);
}

}  // namespace
}  // namespace campo
