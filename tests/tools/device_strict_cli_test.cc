// --device cpu:strict (runtime/strict_backend.h) through every command that runs steps:
// model arrays, campo eval, bench, plan's profiling step, calibrate and BERT's masked LM run
// on the backend the user names. The strict backend's tensors refuse direct host access, so
// any host read or write outside its copies would have thrown; each command's JSON reports
// the default CPU backend's allocations during the run, which must be 0, and the results
// are --device cpu's bit for bit where nothing is timed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::CliResult;
using testing::json_event;
using testing::run_cli;
using testing::TempDir;

nlohmann::json read_json(const std::string& file) {
  std::ifstream f(file);
  return nlohmann::json::parse(f);
}

// What every strict run reports: the device, copies through the backend, nothing from the
// default CPU backend.
void expect_all_on_strict(const nlohmann::json& j, int64_t min_to_device, int64_t min_to_host) {
  EXPECT_EQ(j["device"], "cpu:strict") << j.dump();
  ASSERT_TRUE(j.contains("host_copies")) << j.dump();
  EXPECT_GE(j["host_copies"]["to_device"].get<int64_t>(), min_to_device) << j.dump();
  EXPECT_GE(j["host_copies"]["to_host"].get<int64_t>(), min_to_host) << j.dump();
  EXPECT_EQ(j["default_cpu_allocations"], 0) << j.dump();
}

TEST(DeviceStrictCliTest, ModelArrayTrainsOnTheStrictBackendAsOnTheCpu) {
  TempDir dir;
  for (const std::string precision : {"fp32", "amp"}) {
    std::vector<nlohmann::json> results;
    for (const std::string device : {"cpu", "cpu:strict"}) {
      const std::string ckpt = dir.str() + "/" + precision + device + ".safetensors";
      const CliResult r =
          run_cli({"train", "--model",      "lenet",     "--dataset",   "synthetic", "--array",
                   "2",     "--lr",         "0.05,0.02", "--steps",     "4",         "--batch",
                   "16",    "--limit-test", "64",        "--precision", precision,   "--progress",
                   "none",  "--device",     device,      "--save",      ckpt});
      ASSERT_EQ(r.code, 0) << r.err;
      results.push_back(json_event(r.out, "result"));
      for (int i = 0; i < 2; ++i)
        EXPECT_TRUE(fs::exists(results.back()["models"][i]["checkpoint"].get<std::string>()));
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(results[1]["models"][i]["final_loss"], results[0]["models"][i]["final_loss"]);
      EXPECT_EQ(results[1]["models"][i]["test_accuracy"], results[0]["models"][i]["test_accuracy"]);
    }
    EXPECT_FALSE(results[0].contains("host_copies"));
    // Each step: the stacked images and the labels in, the two models' losses out.
    expect_all_on_strict(results[1], 8, 4);
    // Steps 2 to 4 took theirs from the prefetch: uploaded during the step before.
    EXPECT_EQ(results[1]["host_copies"]["uploads"], 6) << results[1].dump();
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The input prefetch (train/prefetch.h) reads one batch ahead within an epoch: over epoch
// ends and through a --resume the strict run (which prefetches, as a GPU does) trains on the
// batches --device cpu trains on, in the same order: the same weights byte for byte.
TEST(DeviceStrictCliTest, PrefetchAcrossEpochsAndResumeKeepsTheCpusBatches) {
  TempDir dir;
  // The file the run on `device` saves, after `extra`; its JSON result in `result`.
  auto train = [&](const std::string& device, const std::string& name,
                   std::vector<std::string> extra, nlohmann::json* result = nullptr) {
    const std::string path = dir.str() + "/" + name + ".safetensors";
    std::vector<std::string> a = {"train",     "--model",       "lenet", "--dataset",
                                  "synthetic", "--limit-train", "48",    "--batch",
                                  "16",        "--epochs",      "3",     "--precision",
                                  "amp",       "--progress",    "none",  "--device",
                                  device,      "--save",        path};
    a.insert(a.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(a);
    EXPECT_EQ(r.code, 0) << r.err;
    if (result) *result = json_event(r.out, "result");
    return file_bytes(path);
  };
  nlohmann::json j;
  const std::string strict = train("cpu:strict", "strict", {}, &j);
  EXPECT_TRUE(strict == train("cpu", "cpu", {}));
  EXPECT_EQ(j["steps"], 9);
  // 3 epochs of 3 batches: the last two of each epoch were uploaded ahead (images, labels).
  EXPECT_EQ(j["host_copies"]["uploads"], 3 * 2 * 2) << j.dump();
  // Stopped in the middle of epoch 2 (its schedule ends there), then resumed to the end.
  train("cpu", "cpu_half", {"--steps", "5"});
  train("cpu:strict", "strict_half", {"--steps", "5"});
  const std::string cpu_resumed =
      train("cpu", "cpu_resumed", {"--resume", dir.str() + "/cpu_half.safetensors"});
  EXPECT_TRUE(cpu_resumed == train("cpu:strict", "strict_resumed",
                                   {"--resume", dir.str() + "/strict_half.safetensors"}));
}

TEST(DeviceStrictCliTest, EvalRunsOnTheStrictBackendWithTheCpusAccuracy) {
  TempDir dir;
  const std::string ckpt = dir.str() + "/lenet.safetensors";
  ASSERT_EQ(run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "5",
                     "--batch", "16", "--limit-test", "32", "--progress", "none", "--save", ckpt})
                .code,
            0);
  std::vector<nlohmann::json> results;
  for (const std::string device : {"cpu", "cpu:strict"}) {
    const CliResult r = run_cli({"eval", "--checkpoint", ckpt, "--dataset", "synthetic", "--limit",
                                 "100", "--batch", "32", "--device", device});
    ASSERT_EQ(r.code, 0) << r.err;
    results.push_back(json_event(r.out, "eval"));
  }
  EXPECT_EQ(results[1]["test_accuracy"], results[0]["test_accuracy"]);
  EXPECT_EQ(results[1]["samples"], 100);
  // Four batches (32, 32, 32, 4) in and their logits out, the weights in once.
  expect_all_on_strict(results[1], 4, 4);
}

TEST(DeviceStrictCliTest, BenchTimesEveryPolicyOnTheStrictBackend) {
  TempDir dir;
  const std::string json = dir.str() + "/bench.json";
  const CliResult r = run_cli({"bench",
                               "--model",
                               "lenet",
                               "--batch",
                               "8",
                               "--steps",
                               "2",
                               "--repeats",
                               "1",
                               "--warmup",
                               "1",
                               "--no-peak",
                               "--precision",
                               "fp32,amp,cost-aware",
                               "--calibration",
                               "none",
                               "--json",
                               json,
                               "--device",
                               "cpu:strict"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("device: cpu:strict over "), std::string::npos) << r.out;
  const nlohmann::json j = read_json(json);
  ASSERT_EQ(j.size(), 3u) << j.dump();
  for (const auto& e : j) {
    EXPECT_GT(e["median_samples_per_sec"].get<double>(), 0) << e.dump();
    // The one batch in per policy; the loss scale's finite flag is not fetched in bf16.
    expect_all_on_strict(e, 2, 0);
  }
}

TEST(DeviceStrictCliTest, DcganBenchAndPlanRunOnTheStrictBackend) {
  TempDir dir;
  const std::string json = dir.str() + "/bench.json";
  const CliResult r =
      run_cli({"bench",    "--model",   "dcgan",       "--image-size", "32",     "--batch",
               "8",        "--steps",   "2",           "--repeats",    "1",      "--warmup",
               "1",        "--no-peak", "--precision", "fp32,amp",     "--json", json,
               "--device", "cpu:strict"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& e : read_json(json)) expect_all_on_strict(e, 2, 0);
  const std::string plan = dir.str() + "/plan.json";
  const CliResult p =
      run_cli({"plan", "--model", "dcgan", "--image-size", "32", "--batch", "8", "--precision",
               "cost-aware", "--calibration", "none", "--device", "cpu:strict", "--json", plan});
  ASSERT_EQ(p.code, 0) << p.err;
  expect_all_on_strict(read_json(plan), 1, 0);
}

TEST(DeviceStrictCliTest, CostAwarePlanProfilesOnTheStrictBackend) {
  TempDir dir;
  const std::string json = dir.str() + "/plan.json";
  const CliResult r =
      run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "cost-aware",
               "--calibration", "none", "--device", "cpu:strict", "--json", json});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: lenet, precision cost-aware, device cpu:strict"), std::string::npos)
      << r.out;
  expect_all_on_strict(read_json(json), 1, 0);
}

TEST(DeviceStrictCliTest, CalibrationMeasuresOnTheStrictBackend) {
  TempDir dir;
  const std::string out = dir.str() + "/calibration.json";
  // The noise limits raised: another suite may share the machine (tests/perf/
  // calibration_noise_test.cc tests them).
  const CliResult r = run_cli({"calibrate", "--quick", "--models", "lenet,dcgan,attention",
                               "--budget-minutes", "1", "--out", out, "--device", "cpu:strict",
                               "--max-load", "100", "--max-spread", "100000",
                               "--max-shape-spread", "100000"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(out));
  const nlohmann::json j = json_event(r.out, "calibrate");
  EXPECT_EQ(j["out"], out);
  expect_all_on_strict(j, 1, 0);
}

// A text corpus of number words for BERT's masked LM (as tests/tools/bert_cli_test.cc's).
std::string write_corpus(const std::string& path) {
  const char* words[] = {"zero", "one", "two", "three", "four", "five", "six", "seven"};
  std::ofstream f(path);
  for (int i = 0; i < 300; ++i) {
    for (int k = 0; k < 6; ++k) f << (k ? " " : "") << words[(i * 5 + k) % 8];
    f << ".\n";
  }
  return path;
}

TEST(DeviceStrictCliTest, BertMaskedLmTrainsAndEvaluatesOnTheStrictBackendAsOnTheCpu) {
  TempDir dir;
  const std::string text = write_corpus(dir.str() + "/corpus.txt");
  std::vector<nlohmann::json> train, eval;
  for (const std::string device : {"cpu", "cpu:strict"}) {
    const std::string ckpt = dir.str() + "/bert-" + device + ".safetensors";
    const CliResult r = run_cli({"train",
                                 "--model",
                                 "bert",
                                 "--bert-config",
                                 "tiny",
                                 "--dataset",
                                 "text:" + text,
                                 "--seq-len",
                                 "16",
                                 "--batch",
                                 "8",
                                 "--steps",
                                 "3",
                                 "--precision",
                                 "amp",
                                 "--progress",
                                 "none",
                                 "--device",
                                 device,
                                 "--save",
                                 ckpt});
    ASSERT_EQ(r.code, 0) << r.err;
    train.push_back(json_event(r.out, "result"));
    const CliResult e = run_cli({"eval", "--checkpoint", ckpt, "--dataset", "text:" + text,
                                 "--seq-len", "16", "--device", device});
    ASSERT_EQ(e.code, 0) << e.err;
    eval.push_back(json_event(e.out, "eval"));
  }
  EXPECT_EQ(train[1]["final_loss"], train[0]["final_loss"]);
  EXPECT_EQ(train[1]["test_accuracy"], train[0]["test_accuracy"]);
  EXPECT_EQ(eval[1]["test_accuracy"], eval[0]["test_accuracy"]);
  expect_all_on_strict(train[1], 6, 3);
  expect_all_on_strict(eval[1], 1, 1);
}

}  // namespace
}  // namespace campo
