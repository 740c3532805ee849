// cost-aware's measured guard (train/policy_guard.h): the decision on recorded timings, the
// guard on real sessions, and through campo train and campo bench.
#include "train/policy_guard.h"

#include <gtest/gtest.h>

#include <sstream>

#include "../tools/cli_test_util.h"
#include "models/models.h"
#include "train/make_session.h"

namespace campo {
namespace {

using campo::testing::expect_error;
using campo::testing::json_event;
using campo::testing::run_cli;

GuardCandidate timed(const std::string& policy, std::vector<double> ms) {
  GuardCandidate c;
  c.policy = policy;
  c.ms = std::move(ms);
  return c;
}

TEST(PolicyGuardTest, AFasterPlanBeyondTheNoiseReplacesCostAware) {
  GuardOptions g;  // 3% at least
  // fp32 20% faster, timings steady: fp32 is run.
  GuardVerdict v = decide_guard({timed("cost-aware", {10, 10.1, 9.9, 10, 10}),
                                 timed("fp32", {8, 8.1, 7.9, 8, 8}), timed("amp", {12, 12, 12})},
                                g);
  EXPECT_TRUE(v.ran);
  EXPECT_EQ(v.kept, "fp32");
  EXPECT_DOUBLE_EQ(v.candidates[0].median_ms, 10);
  EXPECT_DOUBLE_EQ(v.candidates[1].median_ms, 8);
  EXPECT_NE(v.line().find("guard: fp32 replaces the cost-aware plan"), std::string::npos)
      << v.line();
  EXPECT_EQ(v.json()["kept"], "fp32");
  EXPECT_EQ(v.json()["candidates"]["amp"]["steps"], 3);
  // amp 5% faster, but inside a 2% noise doubled to ... 3% margin: 5% > 3%, amp is run.
  v = decide_guard({timed("cost-aware", {10, 10, 10, 10}), timed("fp32", {11, 11, 11, 11}),
                    timed("amp", {9.5, 9.5, 9.5, 9.5})},
                   g);
  EXPECT_EQ(v.kept, "amp");
  // 2% faster: inside the 3% floor, cost-aware is kept.
  v = decide_guard({timed("cost-aware", {10, 10, 10}), timed("fp32", {9.8, 9.8, 9.8})}, g);
  EXPECT_EQ(v.kept, "cost-aware");
  EXPECT_NE(v.line().find("guard: cost-aware kept (10.0 ms a step; fp32 9.80"), std::string::npos)
      << v.line();
  // 20% faster but the timings spread by 40% of their median: not beyond the noise.
  v = decide_guard({timed("cost-aware", {6, 8, 10, 12, 14}), timed("fp32", {8, 8, 8, 8, 8})}, g);
  EXPECT_EQ(v.kept, "cost-aware");
  EXPECT_NEAR(v.margin, 0.8, 1e-9);
  // Cost-aware is the fastest: kept.
  v = decide_guard({timed("cost-aware", {5, 5, 5}), timed("fp32", {8, 8, 8})}, g);
  EXPECT_EQ(v.kept, "cost-aware");
}

SessionSpec lenet_spec(Precision policy) {
  SessionSpec s;
  s.graph.model = "lenet";
  s.graph.model_options.in_channels = 1;
  s.graph.model_options.image_size = 28;
  s.graph.image_shape = {1, 28, 28};
  s.graph.batch = 8;
  s.graph.precision.policy = policy;
  s.graph.precision.profile_warmup = 0;
  s.graph.precision.profile_steps = 1;
  s.models = one_model(s.graph.optimizer, 3);
  return s;
}

TEST(PolicyGuardTest, TimesTheChosenPlanAgainstFp32AndAmpAndHandsOnItsCosts) {
  int built = 0;
  const SessionFactory make = [&](const SessionSpec& s) {
    ++built;
    return make_session(s, default_cpu_backend());
  };
  GuardOptions g;
  g.warmup = 0;
  g.steps = 2;
  std::ostringstream log;
  const GuardVerdict v = guard_run(lenet_spec(Precision::cost_aware), make, "", log, g);
  ASSERT_TRUE(v.ran);
  EXPECT_EQ(built, 3);  // cost-aware's, fp32's and amp's sessions
  ASSERT_GE(v.candidates.size(), 2u);
  EXPECT_EQ(v.candidates[0].policy, "cost-aware");
  EXPECT_EQ(v.candidates[1].policy, "fp32");
  for (const GuardCandidate& c : v.candidates) EXPECT_EQ(c.ms.size(), 2u) << c.policy;
  EXPECT_NE(log.str().find("guard: timing the cost-aware plan"), std::string::npos);
  EXPECT_NE(log.str().find(v.line()), std::string::npos);
  ASSERT_EQ(v.step_costs.size(), 1u);
  ASSERT_NE(v.step_costs[0], nullptr);

  // The run's spec: the plan's costs (no second profiling step), or the faster policy.
  SessionSpec run = lenet_spec(Precision::cost_aware);
  GuardVerdict kept = v;
  kept.kept = "cost-aware";
  apply_guard(run, kept);
  EXPECT_EQ(run.graph.precision.costs, v.step_costs[0]);
  EXPECT_EQ(run.graph.precision.policy, Precision::cost_aware);
  run = lenet_spec(Precision::cost_aware);
  GuardVerdict replaced = v;
  replaced.kept = "fp32";
  apply_guard(run, replaced);
  EXPECT_EQ(run.graph.precision.policy, Precision::fp32);
  EXPECT_EQ(run.graph.precision.costs, nullptr);

  // Not cost-aware: nothing timed, nothing printed; --no-guard: one line saying so.
  built = 0;
  std::ostringstream quiet;
  EXPECT_FALSE(guard_run(lenet_spec(Precision::fp32), make, "", quiet, g).reported());
  EXPECT_EQ(quiet.str(), "");
  EXPECT_EQ(guard_run(lenet_spec(Precision::cost_aware), make, "--no-guard", quiet, g).line(),
            "guard: not run (--no-guard)");
  EXPECT_EQ(quiet.str(), "guard: not run (--no-guard)\n");
  EXPECT_EQ(built, 0);
}

TEST(PolicyGuardTest, TrainAndBenchReportTheVerdict) {
  const std::vector<std::string> train = {"train",     "--model",       "lenet", "--dataset",
                                          "synthetic", "--limit-train", "128",   "--limit-test",
                                          "64",        "--batch",       "32",    "--progress",
                                          "none",      "--calibration", "none"};
  auto r = run_cli(train);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("guard: "), std::string::npos) << r.out;
  nlohmann::json j = json_event(r.out);
  ASSERT_TRUE(j.contains("guard")) << r.out;
  EXPECT_TRUE(j["guard"]["ran"].get<bool>());
  const std::string kept = j["guard"]["kept"];
  EXPECT_EQ(j["precision"], kept);  // what the run trained with

  std::vector<std::string> no_guard = train;
  no_guard.push_back("--no-guard");
  r = run_cli(no_guard);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("guard: not run (--no-guard)"), std::string::npos) << r.out;
  j = json_event(r.out);
  EXPECT_FALSE(j["guard"]["ran"].get<bool>());
  EXPECT_EQ(j["precision"], "cost-aware");

  std::vector<std::string> fp32 = no_guard;
  fp32.insert(fp32.end(), {"--precision", "fp32"});
  fp32.erase(std::find(fp32.begin(), fp32.end(), "--calibration"),
             std::find(fp32.begin(), fp32.end(), "--calibration") + 2);
  expect_error(run_cli(fp32), "--no-guard has no effect with --precision fp32");
  expect_error(run_cli({"bench", "--model", "lenet", "--precision", "fp32", "--no-guard"}),
               "--no-guard applies to the cost-aware policy");

  r = run_cli({"bench", "--model", "lenet", "--batch", "16", "--precision", "fp32,cost-aware",
               "--steps", "1", "--warmup", "0", "--repeats", "1", "--no-peak", "--calibration",
               "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("guard: "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace campo
