// The memory report of `campo bench` and `campo train` (graph/memory_report.h): the
// relations its figures obey, through the commands a user runs. No size is pinned; the
// parts add up to the total, no plan is below its lower bound, Adam's state is two tensors
// per weight, and the process's peak holds the session.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::json_event;
using testing::run_cli;
using testing::TempDir;

// The figures of one memory object (MiB): the parts sum to the total, the arena holds at
// least the values live at its busiest point, the gradients are in the arena.
void expect_consistent(const nlohmann::json& m) {
  const double parts =
      m.at("arena_mib").get<double>() + m.at("weights_mib").get<double>() +
      m.at("optimizer_state_mib").get<double>() + m.value("quantization_state_mib", 0.0) +
      m.at("weight_copies_mib").get<double>() + m.at("inputs_mib").get<double>() +
      m.at("workspace_mib").get<double>() + m.at("kernel_buffers_mib").get<double>();
  EXPECT_NEAR(parts, m.at("total_mib").get<double>(), 1e-6) << m.dump();
  EXPECT_GT(m.at("live_peak_mib").get<double>(), 0) << m.dump();
  EXPECT_GE(m.at("arena_mib").get<double>(), m.at("live_peak_mib").get<double>()) << m.dump();
  EXPECT_GT(m.at("gradients_mib").get<double>(), 0) << m.dump();
  EXPECT_LE(m.at("gradients_mib").get<double>(), m.at("arena_mib").get<double>()) << m.dump();
}

TEST(MemoryReportCliTest, BenchReportsEachPolicysMemory) {
  TempDir dir;
  const std::string json = dir.file("bench.json");
  auto r = run_cli({"bench",
                    "--model",
                    "lenet",
                    "--batch",
                    "16",
                    "--precision",
                    "fp32,cost-aware",
                    "--calibration",
                    "none",
                    "--optimizer",
                    "adam",
                    "--steps",
                    "2",
                    "--warmup",
                    "1",
                    "--repeats",
                    "1",
                    "--no-peak",
                    "--json",
                    json});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("memory: arena"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak RSS of the process (every policy)"), std::string::npos) << r.out;
  std::ifstream in(json);
  const nlohmann::json results = nlohmann::json::parse(in);
  ASSERT_EQ(results.size(), 2u);
  for (const nlohmann::json& res : results) {
    const nlohmann::json& m = res.at("memory");
    expect_consistent(m);
    // LeNet has no buffers: Adam keeps two moments per weight.
    EXPECT_NEAR(m.at("optimizer_state_mib").get<double>(), 2 * m.at("weights_mib").get<double>(),
                1e-9)
        << m.dump();
    EXPECT_GE(res.at("peak_rss_mib").get<double>(), m.at("total_mib").get<double>());
  }
  // fp32 keeps no low-precision weight copies; cost-aware's folded weight casts are bf16
  // copies of (some of) the weights, half their size at most.
  EXPECT_EQ(results[0].at("memory").at("weight_copies_mib").get<double>(), 0.0);
  const nlohmann::json& ca = results[1].at("memory");
  EXPECT_LE(ca.at("weight_copies_mib").get<double>(), ca.at("weights_mib").get<double>() / 2);
}

TEST(MemoryReportCliTest, TrainPutsTheReportInItsResultAndProfilePrintsIt) {
  auto train = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"train",     "--model",       "lenet", "--dataset",
                                  "synthetic", "--batch",       "16",    "--steps",
                                  "3",         "--limit-train", "64",    "--limit-test",
                                  "32",        "--progress",    "none"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  auto plain = train({});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("memory: arena"), std::string::npos) << plain.out;
  const nlohmann::json result = json_event(plain.out);
  expect_consistent(result.at("memory"));
  EXPECT_GE(result.at("peak_rss_mib").get<double>(),
            result.at("memory").at("total_mib").get<double>());

  auto profiled = train({"--profile"});
  ASSERT_EQ(profiled.code, 0) << profiled.err;
  EXPECT_NE(profiled.out.find("memory: arena"), std::string::npos) << profiled.out;
}

// campo plan predicts, before anything is compiled, the memory plan the executor then makes:
// for the policies that need no profiling, the same arena, lower bound, weights, optimizer
// state and inputs as the compiled session's bench reports; no kernel workspace yet.
TEST(MemoryReportCliTest, PlanPredictsWhatBenchCompiles) {
  TempDir dir;
  for (const std::string policy : {"fp32", "amp"}) {
    const std::string plan_json = dir.file("plan-" + policy + ".json");
    const std::string bench_json = dir.file("bench-" + policy + ".json");
    auto plan = run_cli({"plan", "--model", "resnet18", "--batch", "4", "--image-size", "32",
                         "--channels", "3", "--precision", policy, "--json", plan_json});
    ASSERT_EQ(plan.code, 0) << plan.err;
    EXPECT_NE(plan.out.find("predicted memory: arena"), std::string::npos) << plan.out;
    auto bench = run_cli({"bench",        "--model", "resnet18",   "--batch",  "4",
                          "--image-size", "32",      "--channels", "3",        "--precision",
                          policy,         "--steps", "1",          "--warmup", "0",
                          "--repeats",    "1",       "--no-peak",  "--json",   bench_json});
    ASSERT_EQ(bench.code, 0) << bench.err;
    std::ifstream plan_in(plan_json), bench_in(bench_json);
    const nlohmann::json predicted = nlohmann::json::parse(plan_in).at("memory");
    const nlohmann::json compiled = nlohmann::json::parse(bench_in).at(0).at("memory");
    expect_consistent(predicted);
    for (const char* key : {"arena_mib", "live_peak_mib", "gradients_mib", "weights_mib",
                            "optimizer_state_mib", "weight_copies_mib", "inputs_mib"})
      EXPECT_EQ(predicted.at(key), compiled.at(key)) << policy << " " << key;
    EXPECT_EQ(predicted.at("workspace_mib").get<double>(), 0.0);
    EXPECT_GT(compiled.at("workspace_mib").get<double>(), 0.0);
  }
}

}  // namespace
}  // namespace campo
