// `campo train --model dcgan --array N`: the per-model lists and their errors, one result
// entry, one checkpoint and one sample grid per model; each checkpoint resumes alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::expect_error;
using testing::json_event;
using testing::run_cli;

std::vector<std::string> gan_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {"train",     "--model",      "dcgan",    "--dataset",
                                "synthetic", "--image-size", "32",       "--channels",
                                "3",         "--precision",  "fp32",     "--limit-train",
                                "16",        "--batch",      "8",        "--progress",
                                "none",      "--no-samples", "--epochs", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(GanArrayCliTest, ListsNeedAnArrayOfTheirSize) {
  expect_error(run_cli(gan_args({"--lr", "2e-4,1e-4"})),
               "--lr lists 2 values; give --array 2 to train one dcgan per value");
  expect_error(run_cli(gan_args({"--array", "3", "--seed", "1,2"})),
               "--seed lists 2 values for --array 3");
  expect_error(run_cli(gan_args({"--array", "2", "--weight-decay", "0,-1"})),
               "--weight-decay values must be non-negative, got -1");
  expect_error(run_cli(gan_args({"--array", "2", "--dropout", "0,0.1"})),
               "--dropout applies to models with a configurable dropout only (dcgan has none)");
  expect_error(run_cli(gan_args({"--array", "2", "--momentum", "0.9,0.5"})),
               "--momentum applies to --optimizer sgd only, not adam");
  expect_error(run_cli(gan_args({"--array", "65"})), "--array must be a number of models in 1..64");
  expect_error(run_cli(gan_args({"--array-shuffle", "independent"})),
               "--array-shuffle needs --array N");
  // The array is refused before the missing file is looked for (as the classifiers').
  expect_error(run_cli(gan_args({"--array", "2", "--resume", "x.safetensors"})),
               "--resume does not continue a dcgan array");
}

TEST(GanArrayCliTest, ResumeOfAnArrayNamesWhatToDo) {
  const fs::path dir =
      fs::temp_directory_path() / ("campo_gan_array_resume_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "some.safetensors").string();
  { std::ofstream(file) << "x"; }
  expect_error(run_cli(gan_args({"--array", "2", "--resume", file})),
               "--resume does not continue a dcgan array; resume one of its models alone");
  fs::remove_all(dir);
}

TEST(GanArrayCliTest, TrainsEveryModelAndSavesEachAlone) {
  const fs::path dir =
      fs::temp_directory_path() / ("campo_gan_array_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string save = (dir / "gan.safetensors").string();
  std::vector<std::string> args =
      gan_args({"--array", "2", "--lr", "2e-4,1e-4", "--weight-decay", "0,1e-3", "--seed", "5,6",
                "--steps", "2", "--save", save, "--array-shuffle", "independent"});
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--no-samples") {
      args[i] = "--samples-dir";
      args.insert(args.begin() + std::ptrdiff_t(i) + 1, (dir / "samples").string());
    }
    if (args[i] == "--progress") args[i + 1] = "lines";
  }
  auto r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const nlohmann::json j = json_event(r.out);
  EXPECT_EQ(j["array"], 2);
  EXPECT_EQ(j["array_shuffle"], "independent");
  ASSERT_EQ(j["models"].size(), 2u);
  EXPECT_FLOAT_EQ(j["models"][1]["lr"].get<float>(), 1e-4f);
  EXPECT_FLOAT_EQ(j["models"][1]["weight_decay"].get<float>(), 1e-3f);
  EXPECT_EQ(j["models"][1]["seed"], 6);
  EXPECT_FALSE(j["models"][1].contains("momentum"));                // adam: no momentum to report
  EXPECT_NE(r.out.find("(2 models)"), std::string::npos) << r.out;  // the progress lines
  for (int i = 0; i < 2; ++i) {
    const std::string path = (dir / ("gan-" + std::to_string(i) + ".safetensors")).string();
    ASSERT_TRUE(fs::exists(path)) << path;
    EXPECT_EQ(j["models"][i]["checkpoint"], path);
    EXPECT_GT(j["models"][i]["loss_d"].get<double>(), 0.0);
    EXPECT_GT(j["models"][i]["loss_g"].get<double>(), 0.0);
    const std::string grid =
        (dir / "samples" / ("epoch_001-" + std::to_string(i) + ".png")).string();
    EXPECT_TRUE(fs::exists(grid)) << grid;
    EXPECT_EQ(j["models"][i]["samples"], grid);
  }
  EXPECT_FALSE(fs::exists(save));  // no file for the whole array
  // Model 1's checkpoint resumes alone as a single run of its hyperparameters.
  std::vector<std::string> resume =
      gan_args({"--lr", "1e-4", "--weight-decay", "1e-3", "--seed", "6", "--steps", "3", "--resume",
                (dir / "gan-1.safetensors").string()});
  r = run_cli(resume);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("at step 2"), std::string::npos) << r.out;
  EXPECT_EQ(json_event(r.out)["steps"], 3);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace campo
