// campo predict (perf/predict.h): Habitat's gamma and the scaling against hand-computed
// cases, the device table's checks, a recorded profile predicting a fixed table, and the
// command a user runs: train --profile-out, then predict, with one error line for bad input;
// and campo plan|bench --for, the cost-aware plan from costs predicted from a profile.
#include "perf/predict.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "amp/calibration.h"
#include "runtime/check.h"
#include "tests/amp/calibration_test_util.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::expect_error;
using testing::run_cli;
using testing::TempDir;

DeviceModel device(const std::string& name, double f32, double bf16, double gbs) {
  DeviceModel d;
  d.name = name;
  d.kind = "gpu";
  d.units = 1;
  d.peak_gflops[DType::f32] = f32;
  if (bf16 > 0) d.peak_gflops[DType::bf16] = bf16;
  d.memory_gbs = gbs;
  d.source = "test";
  return d;
}

TEST(PredictTest, GammaIsHabitatsInterpolationOfTheRooflinePosition) {
  EXPECT_DOUBLE_EQ(memory_weight(0, 100, 10), 1.0);    // no FLOPs: all memory
  EXPECT_DOUBLE_EQ(memory_weight(100, 0, 10), 0.0);    // no bytes: all compute
  EXPECT_DOUBLE_EQ(memory_weight(50, 10, 10), 0.75);   // I = R / 2: 1 - 1/4
  EXPECT_DOUBLE_EQ(memory_weight(100, 10, 10), 0.5);   // at the ridge, from either side
  EXPECT_DOUBLE_EQ(memory_weight(200, 10, 10), 0.25);  // I = 2R: R / (2I)
  EXPECT_DOUBLE_EQ(memory_weight(1000, 10, 10), 0.05);
}

TEST(PredictTest, ScalesByBandwidthAndPeakWeightedByGamma) {
  const DeviceModel from = device("a", 100, 400, 10), to = device("b", 400, 3200, 40);
  // Target ridge 400 / 40 = 10 FLOPs/byte.
  // Memory-bound (no FLOPs): the bandwidth ratio alone, 10 / 40.
  EXPECT_NEAR(scale_node_time(8.0, 0, 1e6, DType::f32, false, from, to), 2.0, 1e-12);
  // At the ridge (gamma 1/2): (10/40)^0.5 x (100/400)^0.5 = 1/4.
  EXPECT_NEAR(scale_node_time(8.0, 1e7, 1e6, DType::f32, false, from, to), 2.0, 1e-12);
  // A bf16 GEMM at 8x the ridge of its bf16 peak (3200 / 40 = 80; I = 640): gamma 1/16,
  // (1/4)^(1/16) x (400/3200)^(15/16).
  const double expected = 8.0 * std::pow(0.25, 1.0 / 16) * std::pow(0.125, 15.0 / 16);
  EXPECT_NEAR(scale_node_time(8.0, 6.4e8, 1e6, DType::bf16, true, from, to), expected, 1e-12);
  // A bf16 element-wise node runs at the f32 peak (no FLOPs here: bandwidth only).
  EXPECT_NEAR(scale_node_time(8.0, 0, 1e6, DType::bf16, false, from, to), 2.0, 1e-12);
  // Element-wise bf16 where "a" emulates it (streams at 2 GB/s): that rate, not memory's.
  DeviceModel emulating = from;
  emulating.stream_gbs[DType::bf16] = 2;
  EXPECT_NEAR(scale_node_time(8.0, 0, 1e6, DType::bf16, false, emulating, to), 0.4, 1e-12);
  EXPECT_NEAR(scale_node_time(8.0, 0, 1e6, DType::f32, false, emulating, to), 2.0, 1e-12);
  // gamma is taken against the ridge of the bandwidth the node streams at: a bf16
  // element-wise node on a target streaming bf16 at 20 GB/s has ridge 400 / 20 = 20, so
  // I = 10 gives 1 - 10/40; an f32 one there, ridge 10, gives 1/2.
  DeviceModel streaming = to;
  streaming.stream_gbs[DType::bf16] = 20;
  EXPECT_DOUBLE_EQ(node_gamma(1e7, 1e6, DType::bf16, false, streaming), 0.75);
  EXPECT_DOUBLE_EQ(node_gamma(1e7, 1e6, DType::f32, false, streaming), 0.5);
  // The same device: unchanged.
  EXPECT_NEAR(scale_node_time(3.0, 5e6, 1e6, DType::f32, true, from, from), 3.0, 1e-12);
}

TEST(PredictTest, ADeviceWithoutThePrecisionIsOneLine) {
  const DeviceModel& v100 = find_device(builtin_devices(), "v100");
  try {
    (void)v100.peak_for(DType::bf16, true);
    FAIL() << "v100 gave a bf16 peak";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device v100 has no bf16 peak"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(v100.peak_for(DType::bf16, false), 15700);  // element-wise bf16: the f32 units
}

TEST(PredictTest, TheBuiltInTableHasTheIssuesDevicesWithSources) {
  for (const char* name : {"v100", "t4", "a100", "l4", "h100", "h200", "rtx4090", "rtx3090",
                           "xeon-8480", "epyc-9654"}) {
    const DeviceModel& d = find_device(builtin_devices(), name);
    EXPECT_FALSE(d.source.empty()) << name;
    EXPECT_GT(d.memory_gbs, 0) << name;
  }
  EXPECT_EQ(find_device(builtin_devices(), "h200").memory_gbs, 4800);
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(PredictTest, BadTablesAndNamesAreOneLine) {
  TempDir dir;
  const std::string good = R"({"devices": [{"name": "x", "kind": "gpu", "units": 1,
      "clock_mhz": 1, "memory_gbs": 10, "peak_gflops": {"f32": 100}, "source": "s"}]})";
  struct Case {
    std::string table, needle;
  };
  const Case cases[] = {
      {"{not json", "not JSON"},
      {R"({"devices": []})", "not a device table"},
      {R"({"devices": [{"name": "x", "kind": "tpu", "units": 1, "clock_mhz": 1,
          "memory_gbs": 10, "peak_gflops": {"f32": 100}, "source": "s"}]})",
       "kind must be gpu or cpu"},
      {R"({"devices": [{"name": "x", "kind": "gpu", "units": 1, "clock_mhz": 1,
          "memory_gbs": 10, "peak_gflops": {"bf16": 100}, "source": "s"}]})",
       "peak_gflops has no f32"},
      {R"({"devices": [{"name": "x", "kind": "gpu", "units": 1, "clock_mhz": 1,
          "memory_gbs": -3, "peak_gflops": {"f32": 100}, "source": "s"}]})",
       "'memory_gbs' is -3, not positive"},
      {R"({"devices": [{"name": "x", "kind": "gpu", "units": 1, "clock_mhz": 1,
          "memory_gbs": 10, "peak_gflops": {"f64": 100}, "source": "s"}]})",
       "unknown precision 'f64'"},
      {R"({"devices": [{"name": "x", "kind": "gpu", "units": 1, "clock_mhz": 1,
          "memory_gbs": 10, "peak_gflops": {"f32": 1e300}, "source": "s"}]})",
       "'f32' is 1e+300, more than any device"},
      {R"({"devices": [{"name": "x", "kind": "gpu", "units": 1, "clock_mhz": 1,
          "memory_gbs": 1e300, "peak_gflops": {"f32": 100}, "source": "s"}]})",
       "'memory_gbs' is 1e+300, more than any device"},
  };
  for (const Case& c : cases) {
    write(dir.file("t.json"), c.table);
    expect_error(run_cli({"predict", "--devices", dir.file("t.json"), "--list-devices"}), c.needle);
  }
  write(dir.file("t.json"), good);
  const auto listed = run_cli({"predict", "--devices", dir.file("t.json"), "--list-devices"});
  EXPECT_EQ(listed.code, 0) << listed.err;
  EXPECT_NE(listed.out.find("x: x; f32 100 GFLOP/s, 10 GB/s; s"), std::string::npos) << listed.out;
}

// A recorded profile of three nodes measured on device "a" (its own device_model), and a
// table holding "b": the prediction is the hand-computed one.
const char* kProfile = R"({
 "format": "campo-profile", "version": 1, "model": "tiny", "precision": "fp32", "batch": 4,
 "steps": 10,
 "device_model": {"name": "a", "kind": "cpu", "units": 2, "clock_mhz": 0, "memory_gbs": 10,
                  "peak_gflops": {"f32": 100}, "source": "measured"},
 "nodes": [
  {"name": "mm", "op": "MatMul", "dtype": "f32", "flops": 1e9, "bytes": 1e6, "ms_per_step": 4.0},
  {"name": "relu", "op": "Relu", "dtype": "f32", "flops": 0, "bytes": 1e6, "ms_per_step": 1.0},
  {"name": "mid", "op": "BiasAdd", "dtype": "f32", "flops": 1e7, "bytes": 1e6, "ms_per_step": 2.0}
 ]})";
const char* kTable = R"({"devices": [{"name": "b", "kind": "gpu", "units": 8, "clock_mhz": 1,
  "memory_gbs": 40, "peak_gflops": {"f32": 400}, "source": "test"}]})";

TEST(PredictTest, ANodeChangingPrecisionScalesByItsTrafficAndItsPrecisionsPeak) {
  const DeviceModel from = device("a", 100, 400, 10), to = device("b", 400, 3200, 40);
  const Traffic f32 = {{DType::f32, 1e6}}, bf16 = {{DType::bf16, 0.5e6}};
  // An f32 GEMM measured 8 ms on a, in bf16 on b: half the bytes (0.5e6) at 4x the bandwidth,
  // memory term (0.5e6 / 40) / (1e6 / 10) = 1/8; compute term a's f32 peak over b's bf16 one,
  // 100 / 3200; gamma on b in bf16: ridge 3200 / 40 = 80, I = 6.4e8 / 0.5e6 = 1280, 1/32.
  const double expected = 8.0 * std::pow(0.125, 1.0 / 32) * std::pow(100.0 / 3200, 31.0 / 32);
  EXPECT_NEAR(scale_node_time(8.0, 6.4e8, f32, DType::f32, bf16, DType::bf16, true, from, to),
              expected, 1e-12);
  // Element-wise without FLOPs: the bytes' time alone, 8 x 1/8.
  EXPECT_NEAR(scale_node_time(8.0, 0, f32, DType::f32, bf16, DType::bf16, false, from, to), 1.0,
              1e-12);
  // The same traffic on both sides: the one-precision formula.
  EXPECT_DOUBLE_EQ(scale_node_time(8.0, 1e7, f32, DType::f32, f32, DType::f32, false, from, to),
                   scale_node_time(8.0, 1e7, 1e6, DType::f32, false, from, to));
  // A precision the target does not compute in: one line.
  const DeviceModel f32_only = device("c", 400, 0, 40);
  EXPECT_THROW(
      scale_node_time(8.0, 6.4e8, f32, DType::f32, bf16, DType::bf16, true, from, f32_only), Error);
}

TEST(PredictTest, EachDtypesBytesStreamAtTheirOwnRate) {
  // "e" emulates bf16: its bf16 bytes stream at 2 GB/s, its f32 ones at memory's 10.
  DeviceModel e = device("e", 100, 100, 10);
  e.stream_gbs[DType::bf16] = 2;
  // A cast f32 -> bf16 of 1e6 elements: 4e6 bytes at 10 GB/s and 2e6 at 2 GB/s, 0.4 + 1 ms.
  const Traffic cast = {{DType::f32, 4e6}, {DType::bf16, 2e6}};
  EXPECT_NEAR(traffic_ms(cast, e, false), 1.4, 1e-12);
  EXPECT_NEAR(traffic_ms(cast, e, true), 0.6, 1e-12);  // a GEMM's operands: memory's rate
  EXPECT_DOUBLE_EQ(traffic_bytes(cast), 6e6);
  // From e to a device streaming everything at 20 GB/s: 1.4 ms of traffic become 0.3.
  const DeviceModel fast = device("f", 100, 100, 20);
  EXPECT_NEAR(scale_node_time(2.8, 0, cast, DType::bf16, cast, DType::bf16, false, e, fast), 0.6,
              1e-12);
  // gamma against the ridge of the bandwidth this traffic streams at: 6e6 bytes / 1.4 ms.
  EXPECT_NEAR(node_gamma(1e6, cast, DType::f32, false, e),
              memory_weight(1e6, 6e6, 100 / (6e6 / 1.4 * 1e-6)), 1e-12);
}

TEST(PredictTest, ARecordedProfilePredictsAFixedTable) {
  TempDir dir;
  write(dir.file("p.json"), kProfile);
  write(dir.file("d.json"), kTable);
  const auto r = run_cli({"predict", "--profile", dir.file("p.json"), "--device", "b", "--devices",
                          dir.file("d.json"), "--json", dir.file("out.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  // Ridge of b: 10. mm: I = 1000, gamma 0.005: 4 x (1/4)^0.005 x (1/4)^0.995 = 1.
  // relu: memory, 1 x 1/4. mid: I = 10, gamma 1/2: 2 x 1/4. Total 1 + 0.25 + 0.5.
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir.file("out.json")));
  EXPECT_NEAR(j["ms_per_step_predicted"].get<double>(), 1.75, 1e-9);
  EXPECT_NEAR(j["ms_per_step_origin"].get<double>(), 7.0, 1e-12);
  EXPECT_NEAR(j["by_op"]["MatMul"]["ms_predicted"].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(j["nodes"][2]["gamma"].get<double>(), 0.5, 1e-12);
  const size_t step_line = r.out.find("step (every node)");
  ASSERT_NE(step_line, std::string::npos) << r.out;
  std::istringstream fields(r.out.substr(step_line + 17, r.out.find('\n', step_line) - step_line));
  int nodes = 0;
  double measured = 0, predicted = 0, ratio = 0;
  fields >> nodes >> measured >> predicted >> ratio;
  EXPECT_EQ(nodes, 3);
  EXPECT_DOUBLE_EQ(measured, 7.0);
  EXPECT_DOUBLE_EQ(predicted, 1.75);
  EXPECT_DOUBLE_EQ(ratio, 0.25);
  // Named from the table instead of the profile's own measurement: a -> b needs "a" there.
  expect_error(run_cli({"predict", "--profile", dir.file("p.json"), "--device", "b", "--devices",
                        dir.file("d.json"), "--from", "a"}),
               "unknown device 'a' (the table has b)");
}

// With each device's calibration, a bf16 node is scaled by the ratio of the low-precision
// times the two calibrations predict for its shape, a cast by their cast fits' ratio; an f32
// node by the roofline as before.
TEST(PredictTest, CalibrationsScaleLowPrecisionNodesByTheirShapesPredictedTimes) {
  TempDir dir;
  write(dir.file("p.json"), R"({
 "format": "campo-profile", "version": 1, "model": "tiny", "precision": "amp", "batch": 32,
 "steps": 10,
 "device_model": {"name": "a", "kind": "cpu", "units": 2, "clock_mhz": 0, "memory_gbs": 10,
                  "peak_gflops": {"f32": 100, "bf16": 200}, "source": "measured"},
 "nodes": [
  {"name": "mm", "op": "MatMul", "dtype": "bf16", "flops": 65536, "bytes": 6144,
   "ms_per_step": 4.0, "inputs": [{"shape": [32, 32], "dtype": "bf16"},
   {"shape": [32, 32], "dtype": "bf16"}], "outputs": [{"shape": [32, 32], "dtype": "bf16"}]},
  {"name": "cast", "op": "Cast", "dtype": "f32", "flops": 0, "bytes": 6144, "ms_per_step": 0.5,
   "inputs": [{"shape": [32, 32], "dtype": "f32"}], "outputs": [{"shape": [32, 32],
   "dtype": "bf16"}]},
  {"name": "relu", "op": "Relu", "dtype": "f32", "flops": 0, "bytes": 1e6, "ms_per_step": 1.0,
   "inputs": [{"shape": [125000], "dtype": "f32"}], "outputs": [{"shape": [125000],
   "dtype": "f32"}]}
 ]})");
  write(dir.file("d.json"), R"({"devices": [{"name": "b", "kind": "cpu", "units": 8,
  "clock_mhz": 1, "memory_gbs": 40, "peak_gflops": {"f32": 400, "bf16": 800}, "source": "t"}]})");
  // a: f32 MatMul at 1e-6 ms per FLOP; b twice as slow in f32; both with the op model
  // T_lp = 0.5 T_f32 + 1e-9 flops (testing::sample_calibration's aligned MatMul). b's casts
  // cost twice a's.
  Calibration a = testing::sample_calibration(), b = testing::sample_calibration();
  a.f32_ops["MatMul"] = {.key = "MatMul", .per_flop_ms = 1e-6};
  b.f32_ops["MatMul"] = {.key = "MatMul", .per_flop_ms = 2e-6};
  b.cast_to_low = {{0.022, 2.2e-6}, 15, 10.0};
  save_calibration(a, dir.file("a.json"));
  save_calibration(b, dir.file("b.json"));
  const auto r =
      run_cli({"predict", "--profile", dir.file("p.json"), "--device", "b", "--devices",
               dir.file("d.json"), "--json", dir.file("out.json"), "--origin-calibration",
               dir.file("a.json"), "--target-calibration", dir.file("b.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir.file("out.json")));
  const double flops = 65536, there = 0.5 * 1e-6 * flops + 1e-9 * flops,
               here = 0.5 * 2e-6 * flops + 1e-9 * flops;
  EXPECT_NEAR(j["nodes"][0]["ms_predicted"].get<double>(), 4.0 * here / there, 1e-9);
  EXPECT_EQ(j["nodes"][0]["scaled_by"], "calibrations");
  EXPECT_NEAR(j["nodes"][1]["ms_predicted"].get<double>(), 0.5 * 2, 1e-9);
  EXPECT_EQ(j["nodes"][1]["scaled_by"], "cast fits");
  EXPECT_NEAR(j["nodes"][2]["ms_predicted"].get<double>(), 0.25, 1e-9);  // memory: 10 -> 40 GB/s
  EXPECT_EQ(j["nodes"][2]["scaled_by"], "roofline");
  EXPECT_NE(r.out.find("calibrations: "), std::string::npos) << r.out;
  // One calibration alone: one line.
  expect_error(run_cli({"predict", "--profile", dir.file("p.json"), "--device", "b", "--devices",
                        dir.file("d.json"), "--origin-calibration", dir.file("a.json")}),
               "--origin-calibration and --target-calibration go together");
}

TEST(PredictTest, BadProfilesAreOneLine) {
  TempDir dir;
  struct Case {
    std::string profile, needle;
  };
  const Case cases[] = {
      {"[1, 2", "not JSON"},
      {R"({"format": "campo-calibration"})", "not a campo profile"},
      {R"({"format": "campo-profile", "version": 7})", "format version this campo does not read"},
      {R"({"format": "campo-profile", "version": 1, "nodes": []})", "no nodes"},
      {R"({"format": "campo-profile", "version": 1, "nodes": [{"name": "r", "op": "Relu",
           "dtype": "f32", "flops": 0, "bytes": 8, "ms_per_step": 1}]})",
       "does not describe the device it was measured on"},
      {R"({"format": "campo-profile", "version": 1, "nodes": [{"name": "r", "op": "Relu",
           "dtype": "f32", "flops": 0, "bytes": 8, "ms_per_step": 1,
           "inputs": [{"shape": [2, -1], "dtype": "f32"}]}]})",
       "node 0: a shape dimension is not a whole number >= 0"},
  };
  for (const Case& c : cases) {
    write(dir.file("p.json"), c.profile);
    expect_error(run_cli({"predict", "--profile", dir.file("p.json"), "--device", "h100"}),
                 c.needle);
  }
  std::string bad_op = kProfile;
  bad_op.replace(bad_op.find("\"Relu\""), 6, "\"Frob\"");
  write(dir.file("p.json"), bad_op);
  expect_error(run_cli({"predict", "--profile", dir.file("p.json"), "--device", "h100"}),
               "node 1: unknown op 'Frob'");
  write(dir.file("p.json"), kProfile);
  expect_error(run_cli({"predict", "--profile", dir.file("p.json"), "--device", "tpu9"}),
               "unknown device 'tpu9' (the table has v100, t4");
  expect_error(run_cli({"predict", "--device", "h100"}), "--profile is required");
  expect_error(run_cli({"predict", "--profile", dir.file("missing.json"), "--device", "h100"}),
               "missing.json");
}

TEST(PredictTest, TrainWritesAProfileThatPredictReads) {
  TempDir dir;
  const auto t = run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "4",
                          "--batch", "16", "--limit-test", "16", "--precision", "fp32",
                          "--progress", "none", "--profile-out", dir.file("p.json")});
  ASSERT_EQ(t.code, 0) << t.err;
  const nlohmann::json p = nlohmann::json::parse(std::ifstream(dir.file("p.json")));
  EXPECT_EQ(p["format"], "campo-profile");
  EXPECT_EQ(p["model"], "lenet");
  EXPECT_EQ(p["steps"], 4);
  EXPECT_GT(p["device_model"]["peak_gflops"]["f32"].get<double>(), 0);
  EXPECT_GT(p["device_model"]["memory_gbs"].get<double>(), 0);
  double sum = 0;
  bool conv = false;
  for (const auto& n : p["nodes"]) {
    sum += n["ms_per_step"].get<double>();
    EXPECT_EQ(n["calls"], 4) << n["name"];  // every node of the step, once a step
    if (n["op"] == "Conv2D" && n["name"] == "conv1.Conv2D") {
      conv = true;
      // 16 x 6 x 28 x 28 outputs, each 25 multiply-adds (1 channel, 5 x 5): 2 FLOPs each.
      EXPECT_EQ(n["flops"].get<int64_t>(), int64_t(2) * 16 * 6 * 28 * 28 * 25);
      EXPECT_EQ(n["outputs"][0]["shape"], nlohmann::json({16, 6, 28, 28}));
    }
  }
  EXPECT_TRUE(conv);
  EXPECT_NEAR(p["total_ms_per_step"].get<double>(), sum, 1e-9);
  const auto r = run_cli({"predict", "--profile", dir.file("p.json"), "--device", "h100", "--json",
                          dir.file("out.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir.file("out.json")));
  EXPECT_EQ(j["nodes"].size(), p["nodes"].size());
  EXPECT_GT(j["ms_per_step_predicted"].get<double>(), 0);
  EXPECT_LT(j["ms_per_step_predicted"].get<double>(), sum);  // an H100 is faster than 2 cores
  expect_error(run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "1",
                        "--profile-out", dir.file("no/such/dir/p.json")}),
               "--profile-out file");
}

// One fp32 LeNet profile (batch 16) for the --for tests, and a device table whose "same"
// is the device it was measured on.
struct RecordedLenet {
  TempDir dir;
  std::string profile = dir.file("p.json"), table = dir.file("t.json");
  nlohmann::json p;
  RecordedLenet() {
    const auto t = run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "3",
                            "--batch", "16", "--limit-test", "16", "--precision", "fp32",
                            "--progress", "none", "--profile-out", profile});
    EXPECT_EQ(t.code, 0) << t.err;
    p = nlohmann::json::parse(std::ifstream(profile));
    // The measured bf16 peaks of a CPU that emulates bf16 are within noise of its f32 ones,
    // which would leave the plan's choice to chance: this one runs bf16 at twice the rate.
    nlohmann::json& m = p["device_model"];
    m["peak_gflops"]["bf16"] = 2 * m["peak_gflops"]["f32"].get<double>();
    m["stream_gbs"]["bf16"] = 2 * m["memory_gbs"].get<double>();
    write(profile, p.dump());
    nlohmann::json same = m;
    same["name"] = "same";
    write(table, nlohmann::json({{"devices", {same}}}).dump());
  }
};

TEST(PredictTest, PlanForTheProfilesOwnDeviceTakesTheMeasuredTimes) {
  RecordedLenet rec;
  const std::string plan_json = rec.dir.file("plan.json");
  const auto r = run_cli({"plan", "--model", "lenet", "--batch", "16", "--for", "same", "--devices",
                          rec.table, "--profile", rec.profile, "--json", plan_json});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("costs: cost-aware's costs predicted for same"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted step: cost-aware"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("padding: not decided for same"), std::string::npos) << r.out;
  // Nothing was timed here: no calibration looked for, no profiling step.
  EXPECT_EQ(r.err.find("calibration"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(plan_json));
  EXPECT_EQ(j["for"], "same");
  std::map<std::string, double> measured;
  for (const auto& n : rec.p["nodes"]) measured[n["name"]] = n["ms_per_step"].get<double>();
  int compared = 0;
  double fp32_sum = 0;
  for (const auto& n : j["graphs"][0]["nodes"]) {
    if (!n.contains("fp32_ms") || !measured.count(n["name"])) continue;
    // From a device to itself in the precision it was measured in: the measured time.
    EXPECT_NEAR(n["fp32_ms"].get<double>(), measured[n["name"]], 1e-9 + 1e-9 * measured[n["name"]])
        << n["name"];
    fp32_sum += n["fp32_ms"].get<double>();
    ++compared;
  }
  EXPECT_GT(compared, 40);
  EXPECT_NEAR(j["fp32_predicted_ms"].get<double>(), fp32_sum, 1e-6 * fp32_sum);
  EXPECT_GT(j["low_nodes"].get<int>(), 0);
}

TEST(PredictTest, PlanForAGpuPlansWithItsListsWithoutOne) {
  RecordedLenet rec;
  const auto r = run_cli(
      {"plan", "--model", "lenet", "--batch", "16", "--for", "h100", "--profile", rec.profile});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("precision cost-aware, device cuda"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted for h100 (NVIDIA H100"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nodes in f16"), std::string::npos) << r.out;  // cuda's default
  // bf16 on a V100, which has none.
  expect_error(run_cli({"plan", "--model", "lenet", "--batch", "16", "--for", "v100",
                        "--low-precision", "bf16", "--profile", rec.profile}),
               "device v100 has no bf16");
}

TEST(PredictTest, PlanForBadInputIsOneLine) {
  RecordedLenet rec;
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<std::string> plan = {"plan", "--model", "lenet", "--batch", "16"};
  const std::vector<std::string> bench = {
      "bench", "--model", "lenet", "--batch", "16", "--steps", "1", "--repeats", "1", "--no-peak"};
  auto with = [](std::vector<std::string> base, std::vector<std::string> more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  const Case cases[] = {
      {with(plan, {"--for", "h100"}), "--for needs --profile"},
      {with(plan, {"--profile", rec.profile}), "--profile, --from and --devices go with --for"},
      {with(plan, {"--for", "tpu9", "--profile", rec.profile}), "unknown device 'tpu9'"},
      {with(plan, {"--for", "h100", "--profile", rec.profile, "--precision", "amp"}),
       "--for plans the cost-aware policy"},
      {with(plan, {"--for", "h100", "--profile", rec.profile, "--device", "cpu"}),
       "--for h100 is a cuda device, not --device cpu"},
      {{"plan", "--model", "resnet18", "--batch", "16", "--for", "h100", "--profile", rec.profile},
       "is a profile of lenet, not of resnet18"},
      {{"plan", "--model", "lenet", "--batch", "8", "--for", "h100", "--profile", rec.profile},
       "node 'conv1.Conv2D' reads [16,1,28,28], [6,1,5,5] there but [8,1,28,28], [6,1,5,5] here"},
      {{"plan", "--model", "dcgan", "--batch", "16", "--for", "h100", "--profile", rec.profile},
       "not dcgan"},
      {with(plan, {"--for", "h100", "--profile", rec.dir.file("none.json")}), "none.json"},
      {with(bench, {"--for", "h100", "--profile", rec.profile}),
       "--for h100 is not a cpu: bench runs the plan here"},
      {with(bench, {"--for", "same", "--devices", rec.table, "--profile", rec.profile,
                    "--precision", "fp32,amp"}),
       "add cost-aware to --precision"},
  };
  for (const Case& c : cases) expect_error(run_cli(c.args), c.needle);
  // A profile of another model that shares lenet's name for a node: the node kinds differ.
  nlohmann::json other = rec.p;
  other["nodes"][0]["op"] = "MatMul";
  write(rec.dir.file("other.json"), other.dump());
  expect_error(run_cli(with(plan, {"--for", "h100", "--profile", rec.dir.file("other.json")})),
               "is a MatMul there but a Conv2D here");
}

// FP8 against BF16 for the three GEMMs of a linear layer trained on an H100 (forward M x K by
// K x N; data gradient M x N by N x K; weight gradient K x M by M x N), each measured on the
// H100 at its bf16 roofline and predicted with FP8 operands, quantization included. torchao's
// float8 table (torchao/float8/README.md, "Performance", H100, tensorwise scaling, forward and
// backward) gives 0.80x at M, K, N = 1024, 2048, 1024 and 1.39x at 4096, 8192, 16384: FP8 is
// to lose at the first and win at the second.
double fp8_linear_speedup(double m, double k, double n) {
  const DeviceModel& h100 = find_device(builtin_devices(), "h100");
  const double peak = h100.peak_gflops.at(DType::bf16), bandwidth = h100.memory_gbs;
  double bf16 = 0, fp8 = 0;
  const double gemms[3][3] = {{m, k, n}, {m, n, k}, {k, m, n}};  // rows, reduction, columns
  for (const auto& [rows, depth, cols] : gemms) {
    const double flops = 2 * rows * depth * cols, operands = rows * depth + depth * cols,
                 output = rows * cols;
    const Traffic traffic = {{DType::bf16, 2 * (operands + output)}};
    const double ms = std::max(flops / peak, traffic_bytes(traffic) / bandwidth) * 1e-6;
    bf16 += ms;
    fp8 += predict_fp8_gemm(ms, flops, traffic, DType::bf16, operands, output, h100, h100, 0.005)
               .total();
  }
  return bf16 / fp8;
}

TEST(PredictTest, Fp8GemmsLoseAtSmallSizesAndWinAtLargeOnesAsTorchaosTableSays) {
  const double small = fp8_linear_speedup(1024, 2048, 1024);
  const double large = fp8_linear_speedup(4096, 8192, 16384);
  EXPECT_LT(small, 1.0);  // torchao: 0.80
  EXPECT_GT(large, 1.2);  // torchao: 1.39
  EXPECT_LT(large, 2.0);  // never past the peaks' ratio
  // A device without FP8 GEMMs: no FP8 time.
  const DeviceModel& a100 = find_device(builtin_devices(), "a100");
  EXPECT_EQ(a100.fp8_gflops, 0);
  EXPECT_TRUE(std::isinf(
      predict_fp8_gemm(1.0, 1e9, {{DType::f32, 1e6}}, DType::f32, 1e5, 1e5, a100, a100, 0)
          .total()));
  // The table's fp8 peak is read and written back.
  const DeviceModel& h200 = find_device(builtin_devices(), "h200");
  EXPECT_EQ(h200.fp8_gflops, 2 * h200.peak_gflops.at(DType::bf16));
  EXPECT_EQ(parse_device(h200.to_json(), "test").fp8_gflops, h200.fp8_gflops);
}

// campo plan --allow-fp8: the GEMMs that could run on FP8 operands, and those the plan puts
// there; on a device without FP8 GEMMs (this CPU, measured; an A100) one line says why.
TEST(PredictTest, PlanAllowFp8ShowsWhichGemmsGoFp8AndWhy) {
  RecordedLenet rec;
  // "fast8": the profile's own device with FP8 GEMMs 100x its f32 peak: LeNet's GEMMs pay.
  nlohmann::json table = nlohmann::json::parse(std::ifstream(rec.table));
  table["devices"][0]["peak_gflops"]["fp8"] =
      100 * table["devices"][0]["peak_gflops"]["f32"].get<double>();
  table["devices"][0]["name"] = "fast8";
  write(rec.table, table.dump());
  const std::vector<std::string> plan = {"plan",    "--model",   "lenet",    "--batch",
                                         "16",      "--for",     "fast8",    "--devices",
                                         rec.table, "--profile", rec.profile};
  auto with = [](std::vector<std::string> base, std::vector<std::string> more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  const std::string with_json = rec.dir.file("fp8.json"), without_json = rec.dir.file("no.json");
  const auto r = run_cli(with(plan, {"--allow-fp8", "--json", with_json}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("GEMMs on FP8 operands (E4M3 forward, E5M2 gradients, delayed"),
            std::string::npos)
      << r.out;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(with_json));
  const nlohmann::json& fp8 = j["fp8"];
  ASSERT_TRUE(fp8.is_object()) << j.dump(1).substr(0, 2000);
  EXPECT_GT(fp8["candidates"].get<int>(), 5);  // LeNet's 5 layers' GEMMs and their gradients
  EXPECT_GT(fp8["chosen"].get<int>(), 0);
  // Each chosen GEMM is a quantized node of the plan, in the hybrid format.
  std::map<std::string, nlohmann::json> nodes;
  for (const auto& n : j["graphs"][0]["nodes"]) nodes[n["name"]] = n;
  int quantized = 0;
  for (const auto& c : fp8["nodes"]) {
    const nlohmann::json& n = nodes.at(c["name"]);
    EXPECT_EQ(c["chosen"].get<bool>(), n["quant"].is_object()) << c["name"];
    if (!c["chosen"].get<bool>()) continue;
    ++quantized;
    EXPECT_EQ(n["quant"]["format"], "fp8");
    EXPECT_EQ(n["quant"]["scaling"], "delayed");
    EXPECT_LT(c["fp8_ms"].get<double>(), c["fp32_ms"].get<double>()) << c["name"];
  }
  EXPECT_EQ(quantized, fp8["chosen"].get<int>());
  EXPECT_EQ(j["graphs"][0]["quantized_gemms"].get<int>(), quantized);
  // FP8 only where it pays: the plan is predicted no slower than without it.
  ASSERT_EQ(run_cli(with(plan, {"--json", without_json})).code, 0);
  const nlohmann::json k = nlohmann::json::parse(std::ifstream(without_json));
  EXPECT_LT(j["predicted_ms"].get<double>(), k["predicted_ms"].get<double>());
  EXPECT_FALSE(k.contains("fp8"));
  // Where no GEMM can run in FP8, one line says why and the plan is the one without it.
  const auto a100 = run_cli({"plan", "--model", "lenet", "--batch", "16", "--for", "a100",
                             "--profile", rec.profile, "--allow-fp8"});
  ASSERT_EQ(a100.code, 0) << a100.err;
  EXPECT_NE(a100.out.find("fp8: no GEMM can run in FP8: a100 has no FP8 GEMM"), std::string::npos)
      << a100.out;
  const auto cpu = run_cli(
      {"plan", "--model", "lenet", "--batch", "16", "--calibration", "none", "--allow-fp8"});
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("fp8: no GEMM can run in FP8: this CPU has no FP8 GEMM"),
            std::string::npos)
      << cpu.out;
  EXPECT_EQ(cpu.out.find("quantized GEMMs:"), std::string::npos) << cpu.out;
  // Bad combinations: one line each.
  expect_error(run_cli(with(plan, {"--allow-fp8", "--precision", "fp32"})),
               "--allow-fp8 applies to --precision cost-aware only");
  expect_error(run_cli(with(plan, {"--allow-fp8", "--low-precision", "auto"})),
               "--allow-fp8 searches f32, FP8 GEMMs and one low type");
  expect_error(run_cli({"plan", "--model", "dcgan", "--allow-fp8"}),
               "--allow-fp8 plans models of one step graph");
}

TEST(PredictTest, BenchForRunsThePredictedPlanHere) {
  RecordedLenet rec;
  const std::string out = rec.dir.file("bench.json");
  const auto r =
      run_cli({"bench",       "--model",    "lenet",  "--batch",  "16",        "--steps",
               "2",           "--repeats",  "1",      "--warmup", "0",         "--no-peak",
               "--precision", "cost-aware", "--for",  "same",     "--devices", rec.table,
               "--profile",   rec.profile,  "--json", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("costs: cost-aware's costs predicted for same"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("calibration"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(out));
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["for"], "same");
  EXPECT_GT(j[0]["median_samples_per_sec"].get<double>(), 0);
}

}  // namespace
}  // namespace campo
