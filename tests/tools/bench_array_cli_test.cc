// `campo bench --array N` (and plan's): the checks, and that an array's samples/s counts
// every model's batch. No timing is asserted: only the relations the JSON's figures obey.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::expect_error;
using testing::run_cli;
using testing::TempDir;

TEST(BenchArrayCliTest, ArraySizeAndModelAreChecked) {
  expect_error(run_cli({"bench", "--model", "lenet", "--array", "0"}),
               "--array must be a number of models in 1..64, got 0");
  expect_error(run_cli({"bench", "--model", "lenet", "--array", "65"}),
               "--array must be a number of models in 1..64, got 65");
  expect_error(run_cli({"bench", "--model", "lenet", "--array", "two"}),
               "--array expects a number");
  // A model the array cannot build: train/model_array.h's reason line.
  expect_error(run_cli({"bench", "--model", "inception_v3", "--precision", "fp32", "--array", "2"}),
               "--array does not support inception_v3");
  expect_error(run_cli({"bench", "--model", "bert", "--precision", "fp32", "--array", "2"}),
               "--array does not support bert");
  expect_error(run_cli({"plan", "--model", "dcgan", "--precision", "fp32", "--array", "2"}),
               "campo plan --array does not support --model dcgan");
}

// lenet, batch 8, an array of 2: the table and the JSON say so, one step trains 16 samples
// (the step time and the FLOP rate follow from samples/s over 16, not 8) and runs twice the
// GEMM FLOPs of one model.
TEST(BenchArrayCliTest, ArrayOfTwoCountsBothModels) {
  TempDir dir;
  auto bench = [&](const std::string& array, const std::string& json) {
    auto r =
        run_cli({"bench", "--model", "lenet", "--batch", "8", "--precision", "fp32", "--steps", "2",
                 "--warmup", "1", "--repeats", "1", "--no-peak", "--array", array, "--json", json});
    EXPECT_EQ(r.code, 0) << r.err;
    std::ifstream in(json);
    return std::make_pair(r.out, nlohmann::json::parse(in).at(0));
  };
  const auto [out, two] = bench("2", dir.file("two.json"));
  const auto [single_out, one] = bench("1", dir.file("one.json"));
  EXPECT_NE(out.find("array of 2 models (16 samples/step)"), std::string::npos) << out;
  EXPECT_EQ(single_out.find("array of"), std::string::npos) << single_out;
  EXPECT_EQ(two["array"], 2);
  EXPECT_EQ(one["array"], 1);
  EXPECT_EQ(two["batch"], 8);
  const double median = two["median_samples_per_sec"].get<double>();
  ASSERT_GT(median, 0);
  // measured_ms = 1000 x samples per step / samples/s.
  EXPECT_NEAR(two["measured_ms"].get<double>() * median / 1000.0, 16.0, 1e-9 * 16);
  EXPECT_NEAR(
      one["measured_ms"].get<double>() * one["median_samples_per_sec"].get<double>() / 1000.0, 8.0,
      1e-9 * 8);
  EXPECT_EQ(two["gemm_flops_per_step"].get<int64_t>(),
            2 * one["gemm_flops_per_step"].get<int64_t>());
  // The rest within a few FLOPs: the array adds the models' two losses once more.
  EXPECT_NEAR(two["flops_per_step"].get<double>(), 2 * one["flops_per_step"].get<double>(), 16);
  // achieved GFLOP/s = FLOPs per step x steps per second, steps = samples / 16.
  EXPECT_NEAR(two["achieved_gflops"].get<double>(),
              two["flops_per_step"].get<double>() * median / 16.0 * 1e-9,
              1e-9 * two["achieved_gflops"].get<double>());
  // The profiled op times are there, for the per-op comparison of bench/array.
  EXPECT_FALSE(two["op_ms"].empty());
}

}  // namespace
}  // namespace campo
