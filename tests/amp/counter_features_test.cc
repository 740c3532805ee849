// Hardware counters as features of the per-op models (amp/calibration.h), without a GPU: a
// recorded counter table (tests/amp/data/matmul_counters.jsonl, hand-written in the format
// runtime/hardware_counters.h reads, where MatMul's low-precision time follows its DRAM bytes
// and its f32 time its instructions) is fitted as the calibration fits a device's samples.
// The Spearman test selects the DRAM bytes; the model keeps the analytic model of the same
// samples for nodes whose counters are unread, which predicts them and is what a planner on
// a device without counters uses; the calibration file keeps both, and refuses a model that
// uses counters without its analytic model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "amp/calibration.h"
#include "runtime/hardware_counters.h"
#include "tests/amp/calibration_test_util.h"
#include "tests/test_util.h"

namespace campo {
namespace {

const std::string kTable = std::string(CAMPO_SOURCE_DIR) + "/tests/amp/data/matmul_counters.jsonl";

// The table's nodes as samples: every fourth held out. The analytic features are constant
// here (no graph): only the counters rank with the times.
void recorded_samples(std::vector<OpSample>& train, std::vector<OpSample>& heldout) {
  const CounterTable t = read_counter_table(kTable);
  ASSERT_EQ(t.nodes.size(), 32u);
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const NodeCounters& n = t.nodes[i];
    ASSERT_GT(n.fp32_ms, 0);
    ASSERT_GT(n.low_ms, 0);
    OpSample s;
    s.features.fill(1.0);
    for (int c = 0; c < kNumCounters; ++c)
      s.features[size_t(kFirstCounterFeature + c)] = n.values[size_t(c)];
    s.fp32_ms = n.fp32_ms;
    s.low_ms = n.low_ms;
    (i % 4 == 3 ? heldout : train).push_back(s);
  }
}

bool has(const OpModel& m, Feature f) {
  return std::find(m.features.begin(), m.features.end(), f) != m.features.end();
}

TEST(CounterFeaturesTest, SpearmanSelectsTheDramBytesAndKeepsAnAnalyticModel) {
  std::vector<OpSample> train, heldout;
  recorded_samples(train, heldout);
  const OpModel m = fit_op_model("MatMul", train, heldout);
  EXPECT_EQ(m.fit, "features");
  EXPECT_TRUE(has(m, Feature::dram_bytes));
  EXPECT_FALSE(has(m, Feature::tensor_pipe));  // random here: no rank correlation
  EXPECT_TRUE(m.uses_counters());
  EXPECT_LT(m.heldout_mape, 3.0);
  ASSERT_TRUE(m.analytic);
  EXPECT_FALSE(m.analytic->uses_counters());
  // The f32 time alone (sigma + bias) predicts the low time far worse here.
  EXPECT_GT(m.analytic->heldout_mape, 3 * m.heldout_mape);
  // A node whose counters were not read is predicted by the analytic model.
  NodeFeatures unread = heldout[0].features;
  for (int c = kFirstCounterFeature; c < kNumFeatures; ++c) unread[size_t(c)] = std::nan("");
  EXPECT_EQ(&m.for_features(unread), m.analytic.get());
  EXPECT_EQ(&m.for_features(heldout[0].features), &m);
  EXPECT_EQ(m.predict_low_ms(unread, heldout[0].fp32_ms),
            m.analytic->predict_low_ms(unread, heldout[0].fp32_ms));
}

TEST(CounterFeaturesTest, ACounterMissingFromOneSampleIsNoCandidate) {
  std::vector<OpSample> train, heldout;
  recorded_samples(train, heldout);
  train[5].features[size_t(Feature::dram_bytes)] = std::nan("");
  const OpModel m = fit_op_model("MatMul", train, heldout);
  EXPECT_FALSE(has(m, Feature::dram_bytes));
}

TEST(CounterFeaturesTest, TheCalibrationFileKeepsBothModelsAndRefusesOneWithout) {
  std::vector<OpSample> train, heldout;
  recorded_samples(train, heldout);
  Calibration cal = testing::sample_calibration();
  cal.ops["MatMul"] = fit_op_model("MatMul", train, heldout);
  EXPECT_TRUE(uses_counters(cal));
  testing::TempFile file("counters.json");
  save_calibration(cal, file.path);
  Calibration back;
  ASSERT_EQ(read_calibration_file(file.path, cal.machine.kind, back).problem,
            CalibrationProblem::none);
  const OpModel& m = back.ops.at("MatMul");
  EXPECT_EQ(m.features, cal.ops["MatMul"].features);
  ASSERT_TRUE(m.analytic);
  EXPECT_EQ(m.analytic->sigma, cal.ops["MatMul"].analytic->sigma);
  EXPECT_EQ(m.predict_low_ms(heldout[1].features, heldout[1].fp32_ms),
            cal.ops["MatMul"].predict_low_ms(heldout[1].features, heldout[1].fp32_ms));

  nlohmann::json j = file.read();
  for (auto& op : j["ops"])
    if (op["key"] == "MatMul") op.erase("analytic");
  file.write(j.dump());
  const CalibrationCheck c = read_calibration_file(file.path, cal.machine.kind, back);
  EXPECT_EQ(c.problem, CalibrationProblem::corrupt);
  EXPECT_TRUE(testing::contains(c.message,
                                "ops[MatMul] uses hardware counters but has no "
                                "analytic model"))
      << c.message;
}

}  // namespace
}  // namespace campo
