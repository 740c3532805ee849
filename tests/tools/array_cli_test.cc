// `campo train --array N`: the per-model lists, their errors, one result entry and one
// checkpoint per model, each checkpoint read alone by `campo eval`.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::expect_error;
using testing::json_event;
using testing::run_cli;

std::vector<std::string> train_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {"train", "--limit-train", "256", "--limit-test",
                                "64",    "--progress",    "none"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(ArrayCliTest, ListsNeedAnArrayOfTheirSize) {
  expect_error(run_cli(train_args({"--lr", "0.1,0.05"})),
               "--lr lists 2 values; give --array 2 to train one lenet per value");
  expect_error(run_cli(train_args({"--array", "3", "--seed", "1,2"})),
               "--seed lists 2 values for --array 3");
  expect_error(run_cli(train_args({"--array", "2", "--lr", "0.1,x"})),
               "--lr expects a number or a comma-separated list of them");
  expect_error(run_cli(train_args({"--array", "2", "--seed", "1,-1"})), "'1,-1'");
  expect_error(run_cli(train_args({"--array", "2", "--momentum", "0.9,1.5"})),
               "--momentum values must be in [0, 1), got 1.5");
  expect_error(run_cli(train_args({"--array", "2", "--lr", "0.1,-1"})),
               "--lr must list positive learning rates, got -1");
  expect_error(run_cli(train_args({"--array", "65"})),
               "--array must be a number of models in 1..64");
  expect_error(run_cli(train_args({"--array-shuffle", "independent"})),
               "--array-shuffle needs --array N");
  expect_error(run_cli(train_args({"--array", "2", "--array-shuffle", "mine"})),
               "--array-shuffle must be shared or independent, got 'mine'");
}

TEST(ArrayCliTest, ModelsThatCannotBeArrayedSayWhy) {
  expect_error(run_cli(train_args({"--array", "2", "--model", "inception_v3"})),
               "--array does not support inception_v3");
  expect_error(run_cli(train_args({"--array", "2", "--resume", "x.safetensors"})),
               "--resume does not continue a lenet array");
}

TEST(ArrayCliTest, TrainsEveryModelAndSavesEachAlone) {
  const fs::path dir = fs::temp_directory_path() / "campo_array_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string save = (dir / "sweep.safetensors").string();
  auto r = run_cli(train_args({"--model", "lenet", "--array", "3", "--lr", "0.05,0.02,0.01",
                               "--weight-decay", "0,1e-4,1e-3", "--seed", "1,2,3", "--steps", "4",
                               "--batch", "32", "--precision", "fp32", "--save", save}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const nlohmann::json j = json_event(r.out);
  EXPECT_EQ(j["array"], 3);
  ASSERT_EQ(j["models"].size(), 3u);
  EXPECT_FLOAT_EQ(j["models"][1]["lr"].get<float>(), 0.02f);
  EXPECT_FLOAT_EQ(j["models"][2]["weight_decay"].get<float>(), 1e-3f);
  EXPECT_EQ(j["models"][2]["seed"], 3);
  for (int i = 0; i < 3; ++i) {
    const std::string path = (dir / ("sweep-" + std::to_string(i) + ".safetensors")).string();
    ASSERT_TRUE(fs::exists(path)) << path;
    EXPECT_EQ(j["models"][i]["checkpoint"], path);
    // campo eval reads each alone and gets that model's accuracy.
    auto e = run_cli({"eval", "--checkpoint", path, "--limit", "64"});
    ASSERT_EQ(e.code, 0) << e.err;
    const nlohmann::json ej = json_event(e.out, "eval");
    // The same weights through the single model's kernels: a near-tie may flip one of the 64.
    EXPECT_NEAR(ej["test_accuracy"].get<double>(), j["models"][i]["test_accuracy"].get<double>(),
                1.5 / 64)
        << path;
  }
  EXPECT_FALSE(fs::exists(save));  // no file for the whole array
  fs::remove_all(dir);
}

}  // namespace
}  // namespace campo
