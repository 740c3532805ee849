// `campo bench --model dcgan --array N` (perf/plan.h, ModelRunOptions::array): one bench
// step is every model's iteration as one fused step, so it counts N x batch samples and N
// times the FLOPs and parameters of one model.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "perf/bench.h"
#include "perf/plan.h"
#include "runtime/check.h"

namespace campo {
namespace {

BenchResult bench_dcgan(int array) {
  BenchOptions o;
  o.run.model = "dcgan";
  o.run.image_size = 32;
  o.run.channels = 1;
  o.run.batch = 4;
  o.run.optimizer = OptimizerConfig::Kind::adam;
  o.run.array = array;
  o.precisions = {"fp32"};
  o.steps = 1;
  o.repeats = 1;
  o.warmup = 0;
  o.measure_peak = false;
  std::ostringstream out;
  std::vector<BenchResult> results = run_bench(o, default_cpu_backend(), out);
  EXPECT_EQ(results.size(), 1u);
  return results.at(0);
}

TEST(GanBenchArrayTest, AnArrayStepCountsEveryModelsSamplesAndFlops) {
  const BenchResult one = bench_dcgan(1), two = bench_dcgan(2);
  // The fused step runs both models' convolutions: twice the FLOPs (up to the per-model
  // loss reductions, which count a handful of FLOPs each).
  EXPECT_NEAR(double(two.flops.total()), 2.0 * double(one.flops.total()),
              1e-3 * double(one.flops.total()));
  // The achieved rate is the step's FLOPs at the measured steps per second; a step of the
  // array trains 2 x batch samples, so steps/s = samples/s / (2 x 4).
  ASSERT_GT(two.median, 0);
  EXPECT_NEAR(two.achieved_gflops, double(two.flops.total()) * two.median / 8.0 * 1e-9,
              1e-9 * two.achieved_gflops);
  EXPECT_NEAR(one.achieved_gflops, double(one.flops.total()) * one.median / 4.0 * 1e-9,
              1e-9 * one.achieved_gflops);
}

TEST(GanBenchArrayTest, ArraySizeIsChecked) {
  BenchOptions o;
  o.run.model = "dcgan";
  o.run.image_size = 32;
  o.run.array = 0;
  o.precisions = {"fp32"};
  o.measure_peak = false;
  std::ostringstream out;
  try {
    run_bench(o, default_cpu_backend(), out);
    ADD_FAILURE() << "--array 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--array must be a number of models in 1..64"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace campo
