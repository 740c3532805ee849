// --low-precision auto through the command line: cost-aware chooses f32, f16 or bf16 per node
// of the training step (amp/three_way.h) from the profiling step's times of both low types.
// On this project's CPUs f16 is emulated, so the plans are mostly bf16; the tests check what
// is reported and that it trains, not which type wins (tests/train/three_way_training_test.cc
// forces a mix with fixed costs).
#include <gtest/gtest.h>

#include <fstream>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::expect_error;
using testing::json_event;
using testing::run_cli;

const std::vector<std::string> kAutoPlan = {
    "plan", "--model", "lenet", "--batch", "8", "--precision", "cost-aware",
    "--low-precision", "auto", "--calibration", "none"};

TEST(AutoPrecisionCliTest, PlanShowsBothLowTypesAndTheOneTypePlans) {
  testing::TempDir dir;
  std::vector<std::string> a = kAutoPlan;
  const std::string json_path = dir.str() + "/plan.json";
  a.insert(a.end(), {"--json", json_path});
  const testing::CliResult r = run_cli(a);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 ms  f16 ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("search: exact over f32, f16 and bf16 per node"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("dynamic loss scaling on"), std::string::npos) << r.out;
  std::ifstream f(json_path);
  const nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_TRUE(j.contains("f16_nodes")) << j.dump();
  const int f16 = j["f16_nodes"], low = j["low_nodes"];
  EXPECT_NE(r.out.find("totals: " + std::to_string(low - f16) + " nodes in bf16, " +
                       std::to_string(f16) + " in f16, "),
            std::string::npos)
      << r.out;
  // The chosen plan is the fastest predicted of the mixed and the one-type plans.
  const double predicted = j["predicted_ms"];
  EXPECT_LE(predicted, j["bf16_only_predicted_ms"].get<double>() + 1e-9);
  EXPECT_LE(predicted, j["f16_only_predicted_ms"].get<double>() + 1e-9);
  // Each node's row has both low types' times.
  int costed = 0;
  for (const auto& node : j["graphs"][0]["nodes"])
    if (node.contains("f16_ms")) {
      ++costed;
      EXPECT_TRUE(node.contains("low_ms")) << node.dump();
    }
  EXPECT_GT(costed, 10);
}

TEST(AutoPrecisionCliTest, TrainReportsTheMixAndScalesTheLoss) {
  const testing::CliResult r =
      run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "3", "--batch",
               "8", "--limit-train", "64", "--limit-test", "16", "--progress", "none",
               "--precision", "cost-aware", "--low-precision", "auto", "--calibration", "none",
               "--no-guard"});  // the plan as chosen, whatever this machine times
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("(auto: "), std::string::npos) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("dynamic loss scale from"), std::string::npos) << r.out << r.err;
  const nlohmann::json j = json_event(r.out);
  EXPECT_EQ(j.value("low_precision", ""), "auto") << r.out;
  ASSERT_TRUE(j.contains("f16_nodes") && j.contains("bf16_nodes")) << r.out;
  // Which types win is the measured costs' call (all f32 on a CPU without native bf16).
  EXPECT_TRUE(std::isfinite(j.value("final_loss", NAN))) << r.out;
}

TEST(AutoPrecisionCliTest, WhatAutoDoesNotTakeIsOneLine) {
  std::vector<std::string> a = kAutoPlan;
  a.insert(a.end(), {"--search", "traversals"});
  expect_error(run_cli(a), "--low-precision auto chooses among f32, f16 and bf16 by the exact");
  expect_error(run_cli({"plan", "--model", "dcgan", "--image-size", "32", "--batch", "8",
                        "--precision", "cost-aware", "--low-precision", "auto", "--calibration",
                        "none"}),
               "--low-precision auto does not support dcgan yet");
}

}  // namespace
}  // namespace campo
