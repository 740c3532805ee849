// `campo calibrate` and the calibrated profiling step: a tiny calibration run gives a file
// that loads and covers the GEMM ops; the profiling step with a calibration times f32 only
// and takes its low-precision times from the models; plan accepts --calibration; a CUDA
// calibration without CUDA is one clear error. No test looks at a timing.
#include "perf/calibrate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/builder.h"
#include "perf/bench.h"
#include "perf/calibration_store.h"
#include "perf/plan.h"
#include "runtime/cpu_backend.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"
#include "tools/cli.h"
#include "train/profiling.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("campo_calibrate_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// Noise limits no machine hits: these tests look at what a calibration writes, on a machine
// another suite may share (tests/perf/calibration_noise_test.cc tests the limits).
NoiseLimits any_noise() {
  NoiseLimits n;
  n.max_load_fraction = 100;
  n.max_spread = 1000;
  n.max_shape_spread = 1000;
  return n;
}

TEST(CalibrateTest, TinyRunWritesALoadableFileCoveringConvAndMatMul) {
  CalibrateOptions o;
  o.quick = true;
  o.models = {"lenet"};
  o.batches = {2, 3, 4, 6};  // the second is held out
  o.noise = any_noise();
  o.out = temp_path("tiny.json");
  o.samples_out = temp_path("tiny_samples.json");
  std::ostringstream log;
  const Calibration cal = run_calibration(o, log);
  const std::string report = log.str();
  EXPECT_NE(report.find("held-out MAPE"), std::string::npos) << report;
  EXPECT_NE(report.find("cast directions"), std::string::npos) << report;
  EXPECT_NE(report.find("spread %"), std::string::npos) << report;
  EXPECT_NE(report.find("wrote " + o.out), std::string::npos) << report;
  EXPECT_EQ(cal.configurations, 4);
  EXPECT_EQ(cal.heldout_configurations, 1);

  const Calibration loaded = load_calibration(o.out, *default_cpu_backend());
  EXPECT_EQ(loaded.machine.kind, "cpu");
  // How it was made, and the f32 models the profiling step checks it with.
  EXPECT_TRUE(loaded.record.recorded);
  EXPECT_EQ(loaded.record.repeats, 5);
  EXPECT_EQ(loaded.record.measurements, 5);  // the casts and 4 configurations
  EXPECT_GE(loaded.record.cores, 1);
  EXPECT_TRUE(loaded.f32_ops.count("Conv2D")) << report;
  EXPECT_TRUE(loaded.f32_ops.count("MatMul")) << report;
  EXPECT_NE(report.find("noise: 5 repeats"), std::string::npos) << report;
  EXPECT_EQ(loaded.campo_version, CAMPO_VERSION);
  EXPECT_EQ(loaded.low, DType::bf16);
  EXPECT_TRUE(loaded.ops.count("Conv2D")) << report;
  EXPECT_TRUE(loaded.ops.count("MatMul")) << report;
  EXPECT_TRUE(loaded.ops.count("Conv2DBackpropFilter")) << report;
  for (const auto& [key, m] : loaded.ops) {
    EXPECT_GT(m.sigma, 0.0) << key;
    EXPECT_GT(m.train_samples, 0) << key;
  }
  EXPECT_GE(loaded.cast.fixed_ms, 0.0);
  EXPECT_GE(loaded.cast.per_element_ms, 0.0);
  EXPECT_GT(loaded.cast_to_low.samples, 0);
  EXPECT_GT(loaded.cast_to_f32.samples, 0);
  // The raw samples: at least those the models were fitted and scored on (an op with
  // held-out samples only gets no model).
  std::ifstream in(o.samples_out);
  const nlohmann::json samples = nlohmann::json::parse(in);
  int fitted = 0;
  for (const auto& [key, m] : loaded.ops) fitted += m.train_samples + m.heldout_samples;
  EXPECT_GE(int(samples.at("ops").size()), fitted);
  EXPECT_GT(fitted, 0);
  EXPECT_EQ(samples.at("casts").size(),
            size_t(loaded.cast_to_low.samples + loaded.cast_to_f32.samples));
  const auto& first = samples.at("ops").at(0);
  EXPECT_GT(first.at("low_ms").get<double>(), 0.0);
  EXPECT_TRUE(first.at("features").contains("flops"));
  EXPECT_TRUE(first.at("shape").contains("dims"));
  // The report compares the fits, and `campo calibrate --compare-fits` fits the same samples
  // again, measuring nothing, to the same table.
  const size_t table = report.find("| op model | shape | train | held out | linear (before)");
  ASSERT_NE(table, std::string::npos) << report;
  const testing::CliResult r = testing::run_cli({"calibrate", "--compare-fits", o.samples_out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(report.substr(table, report.find("mean over", table) - table)),
            std::string::npos)
      << r.out << "\n---\n"
      << report;
  EXPECT_NE(r.out.find("| Conv2D | conv | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mean over"), std::string::npos) << r.out;
  testing::expect_error(testing::run_cli({"calibrate", "--compare-fits", o.out}),
                        "is a calibration file, not its samples");
  testing::expect_error(testing::run_cli({"calibrate", "--compare-fits", o.samples_out, "--quick"}),
                        "--quick does not apply to --compare-fits");
  fs::remove(o.out);
  fs::remove(o.samples_out);
}

// The "attention" shapes are BERT's six batched products of one attention layer (forward
// and backward): every configuration gives six BatchMatMulV2 samples, and the op gets a
// model of its own (GEMM-like: aligned at T = 64, d = 64).
TEST(CalibrateTest, AttentionShapesGiveABatchMatMulModel) {
  CalibrateOptions o;
  o.quick = true;
  o.models = {"attention"};
  o.batches = {1, 2, 3, 4};  // the second is held out
  o.noise = any_noise();
  o.out = temp_path("attention.json");
  std::ostringstream log;
  const Calibration cal = run_calibration(o, log);
  EXPECT_EQ(cal.configurations, 4);
  EXPECT_NE(log.str().find("attention T=64 heads=4 d=64 batch 1"), std::string::npos) << log.str();
  ASSERT_TRUE(cal.ops.count("BatchMatMulV2")) << log.str();
  const OpModel& m = cal.ops.at("BatchMatMulV2");
  EXPECT_EQ(m.train_samples, 3 * 6);
  EXPECT_EQ(m.heldout_samples, 6);
  EXPECT_FALSE(cal.ops.count("BatchMatMulV2:unaligned"));
  EXPECT_EQ(cal.ops.size(), 1u) << "only the products are timed in low precision";
  fs::remove(o.out);
}

// A calibration of this machine with known models: Conv2D at half its f32 time, and
// every other op without a model.
std::shared_ptr<const Calibration> half_conv_calibration() {
  auto cal = std::make_shared<Calibration>();
  cal->machine = default_cpu_backend()->identity();
  cal->campo_version = CAMPO_VERSION;
  cal->created = "test";
  cal->cast = {0.001, 1e-6};
  OpModel conv;
  conv.key = "Conv2D";
  conv.fit = "ratio";
  conv.sigma = 0.5;
  conv.heldout_mape = 5;  // trusted
  cal->ops[conv.key] = conv;
  return cal;
}

TEST(CalibrateTest, ProfilingWithACalibrationPredictsTheLowTimes) {
  TrainingGraphSpec spec;
  spec.model = "lenet";
  spec.image_shape = {1, 28, 28};
  spec.batch = 4;
  spec.precision.policy = Precision::cost_aware;
  spec.precision.profile_warmup = 0;
  spec.precision.profile_steps = 1;
  spec.precision.calibration = half_conv_calibration();
  const CostTable costs = profile_costs(spec, default_cpu_backend());

  Graph g;
  VariableStore vars(0, default_cpu_backend());
  TrainingGraphSpec fp32 = spec;
  fp32.precision.policy = Precision::fp32;
  build_training_graph(g, vars, fp32);
  ASSERT_EQ(costs.nodes.size(), size_t(g.num_nodes()));
  ASSERT_EQ(costs.low_measured.size(), size_t(g.num_nodes()));
  int convs = 0, measured = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const NodeCost& c = costs.nodes[size_t(id)];
    const bool ran = c.fp32_ms > 0;
    if (g.node(id).kind == OpKind::Conv2D) {
      ++convs;
      EXPECT_DOUBLE_EQ(c.low_ms, 0.5 * c.fp32_ms);  // predicted by the trusted model
      EXPECT_FALSE(costs.low_measured[size_t(id)]);
    } else if (ran && may_run_low(g.node(id), AmpLists::defaults(Device::cpu, DType::bf16))) {
      // No model: timed in low precision instead.
      EXPECT_TRUE(costs.low_measured[size_t(id)]) << g.node(id).name;
      EXPECT_GT(c.low_ms, 0) << g.node(id).name;
      ++measured;
    } else {
      EXPECT_DOUBLE_EQ(c.low_ms, c.fp32_ms) << g.node(id).name;  // stays f32: unchanged
      EXPECT_FALSE(costs.low_measured[size_t(id)]) << g.node(id).name;
    }
  }
  EXPECT_EQ(convs, 2);
  EXPECT_GT(measured, 10);
  EXPECT_EQ(costs.cast.fixed_ms, 0.001);

  // A calibration for another low precision is refused.
  spec.precision.low = DType::f16;
  EXPECT_THROW(profile_costs(spec, default_cpu_backend()), Error);
}

// A model whose held-out error is over kUntrustedMapePercent, or that has none, is not
// trusted; neither is a missing one. Ops that never run low are never "untrusted".
TEST(CalibrateTest, UntrustedNodesAreThoseTheCalibrationCannotPredict) {
  VariableStore vars(0, default_cpu_backend());
  Graph g;
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3, 8, 8});
  ValueId y = b.conv2d(x, b.variable("w", {16, 3, 3, 3}, Init::ones()), ConvAttrs{});
  ValueId r = b.relu(y);
  ValueId s = b.sum(r);
  const NodeId conv = g.value(y).producer, relu = g.value(r).producer, sum = g.value(s).producer;
  Calibration cal = *half_conv_calibration();
  auto untrusted = [&] {
    return untrusted_nodes(g, cal, AmpLists::defaults(Device::cpu, DType::bf16));
  };
  EXPECT_FALSE(untrusted()[size_t(conv)]);  // held-out 5%
  EXPECT_TRUE(untrusted()[size_t(relu)]);   // no model
  EXPECT_FALSE(untrusted()[size_t(sum)]);   // a deny op: stays f32 anyway
  cal.ops["Conv2D"].heldout_mape = kUntrustedMapePercent + 1;
  EXPECT_TRUE(untrusted()[size_t(conv)]);
  cal.ops["Conv2D"].heldout_mape = -1;  // nothing held out
  EXPECT_TRUE(untrusted()[size_t(conv)]);
}

TEST(CalibrateTest, PlanTakesACalibrationFile) {
  const std::string path = temp_path("plan.json");
  save_calibration(*half_conv_calibration(), path);
  PlanOptions o;
  o.run.model = "lenet";
  o.run.batch = 4;
  o.run.calibration = resolve_calibration(path, *default_cpu_backend(), DType::bf16, std::cerr);
  o.precision = Precision::cost_aware;
  std::ostringstream out;
  print_plan(o, out);
  EXPECT_NE(out.str().find("predicted step: cost-aware"), std::string::npos) << out.str();
  fs::remove(path);

  try {
    (void)resolve_calibration(path + ".absent", *default_cpu_backend(), DType::bf16, std::cerr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recalibrate"), std::string::npos) << e.what();
  }
}

TEST(CalibrateTest, BadOptionsAreClearErrors) {
  CalibrateOptions o;
  o.out = temp_path("never.json");
  o.low_precision = "fp8";
  std::ostringstream log;
  EXPECT_THROW(run_calibration(o, log), Error);
  o.low_precision = "bf16";
  o.models = {"resnet9000"};
  EXPECT_THROW(run_calibration(o, log), Error);
  EXPECT_FALSE(fs::exists(o.out));
}

TEST(CalibrateTest, CudaWithoutCudaIsOneClearLine) {
  if (testing::have_cuda_backend()) GTEST_SKIP() << "this build and machine have a CUDA backend";
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = cli::run({"calibrate", "--device", "cuda", "--out", temp_path("cuda.json")});
  ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(code, 0);
  EXPECT_EQ(err.rfind("campo: error: --device cuda", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// --counters writes a recorded counter table (runtime/hardware_counters.h); on a device that
// reads none it is one error line before anything is measured, and no file is written.
TEST(CalibrateTest, CountersOnADeviceThatReadsNoneIsOneLine) {
  const std::string counters = temp_path("counters.jsonl"), out = temp_path("c.json");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code =
      cli::run({"calibrate", "--quick", "--models", "lenet", "--counters", counters, "--out", out});
  const std::string printed = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(code, 0);
  EXPECT_EQ(err.rfind("campo: error: --counters " + counters +
                          ": the cpu backend reads no hardware counters per node (",
                      0),
            0u)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(printed.find("calibrate:"), std::string::npos) << printed;  // nothing measured
  EXPECT_FALSE(std::filesystem::exists(counters));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// --out into a folder that does not exist is one error line before anything is measured,
// and the folder is not created (only the default cache folder is).
TEST(CalibrateTest, OutIntoAMissingFolderIsOneLineAndCreatesNothing) {
  const std::string folder = temp_path("no-such-folder"), out = folder + "/c.json";
  std::filesystem::remove_all(folder);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = cli::run({"calibrate", "--quick", "--models", "lenet", "--out", out});
  const std::string printed = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(code, 0);
  EXPECT_EQ(err.rfind("campo: error: --out calibration file " + out + ": directory " + folder +
                          " does not exist",
                      0),
            0u)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(printed.find("calibrate:"), std::string::npos) << printed;  // nothing measured
  EXPECT_FALSE(std::filesystem::exists(folder));
}

}  // namespace
}  // namespace campo
