// `campo plan` and `campo bench` through the library entry points.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "amp/padding.h"
#include "perf/bench.h"
#include "perf/plan.h"
#include "tests/test_util.h"

namespace campo {
namespace {

TEST(PlanTest, AmpPlanListsEveryNodeAndTotals) {
  PlanOptions o;
  o.run.model = "lenet";
  o.run.batch = 8;
  o.precision = Precision::amp;
  const std::string dot = (std::filesystem::temp_directory_path() / "campo_plan_test.dot").string();
  const std::string json =
      (std::filesystem::temp_directory_path() / "campo_plan_test.json").string();
  o.dot_path = dot;
  o.json_path = json;
  std::ostringstream out;
  print_plan(o, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("conv1.Conv2D"), std::string::npos) << text;
  EXPECT_NE(text.find("allow  bf16"), std::string::npos) << text;
  EXPECT_NE(text.find("deny   f32"), std::string::npos) << text;
  EXPECT_NE(text.find("totals: "), std::string::npos) << text;
  std::ifstream jf(json);
  nlohmann::json j = nlohmann::json::parse(jf);
  EXPECT_GT(j["casts"].get<int>(), 0);
  EXPECT_GT(j["low_nodes"].get<int>(), 0);
  std::ifstream df(dot);
  std::string dot_text((std::istreambuf_iterator<char>(df)), std::istreambuf_iterator<char>());
  EXPECT_EQ(dot_text.rfind("digraph", 0), 0u);
  EXPECT_NE(dot_text.find("Cast"), std::string::npos);
  std::filesystem::remove(dot);
  std::filesystem::remove(json);
}

TEST(PlanTest, Fp32PlanHasNoCasts) {
  PlanOptions o;
  o.run.model = "mlp";
  o.run.batch = 4;
  o.precision = Precision::fp32;
  std::ostringstream out;
  print_plan(o, out);
  EXPECT_NE(out.str().find(" 0 casts"), std::string::npos) << out.str();
}

TEST(BenchTest, RunsPoliciesSideBySide) {
  BenchOptions o;
  o.run.model = "mlp";
  o.run.batch = 16;
  o.precisions = {"fp32", "amp"};
  o.steps = 3;
  o.repeats = 2;
  o.warmup = 1;
  std::ostringstream out;
  auto results = run_bench(o, default_cpu_backend(), out);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].precision, "fp32");
  EXPECT_EQ(results[0].casts, 0);
  EXPECT_DOUBLE_EQ(results[0].ratio_to_fp32, 1.0);
  EXPECT_GT(results[1].casts, 0);
  EXPECT_GT(results[1].low_nodes, 0);
  for (const auto& r : results) {
    EXPECT_EQ(r.samples_per_sec.size(), 2u);
    EXPECT_GT(r.median, 0);
    // The breakdown by (op, compute type) adds up to the profiled step.
    double sum = 0;
    for (const OpTime& t : r.op_ms) sum += t.ms;
    EXPECT_NEAR(sum, r.step_ms, 1e-6 * r.step_ms + 1e-9);
  }
  auto has = [](const BenchResult& r, const char* op, const char* dtype) {
    for (const OpTime& t : r.op_ms)
      if (t.op == op && t.dtype == dtype) return true;
    return false;
  };
  EXPECT_TRUE(has(results[0], "MatMul", "f32"));
  EXPECT_FALSE(has(results[0], "MatMul", "bf16"));
  EXPECT_TRUE(has(results[1], "MatMul", "bf16"));  // amp: MatMul is on the allow list
  EXPECT_TRUE(has(results[1], "Cast", "bf16") || has(results[1], "Cast", "f32"));
  EXPECT_NE(out.str().find("samples/s"), std::string::npos);
}

using testing::TempDir;

// The roofline: each policy's counted FLOPs (the same GEMM FLOPs for fp32 and amp), the
// achieved rate, and the percentage of the measured GEMM peak of its mix; energy from a
// fake powercap tree (its counters stand still: 0 J, but one reading per repetition).
TEST(BenchTest, RooflineAndEnergyInTheTableAndJson) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("powercap/intel-rapl:0"));
  std::ofstream(dir.file("powercap/intel-rapl:0/energy_uj")) << "123456\n";
  std::ofstream(dir.file("powercap/intel-rapl:0/max_energy_range_uj")) << "262143328850\n";
  BenchOptions o;
  o.run.model = "lenet";
  o.run.batch = 16;
  o.precisions = {"fp32", "amp"};
  o.steps = 1;
  o.repeats = 2;
  o.warmup = 1;
  o.json_path = dir.file("bench.json");
  o.powercap_root = dir.file("powercap");
  std::ostringstream out;
  auto results = run_bench(o, default_cpu_backend(), out);
  ASSERT_EQ(results.size(), 2u);
  const std::string text = out.str();
  EXPECT_NE(text.find("peak: one 1024x1024x1024 GEMM"), std::string::npos) << text;
  EXPECT_NE(text.find("roofline: 0.037 GFLOP/step (0.036 in GEMMs)"), std::string::npos) << text;
  EXPECT_NE(text.find("% of the f32 GEMM peak\n"), std::string::npos) << text;
  EXPECT_NE(text.find("% of the GEMM peak of its mix ("), std::string::npos) << text;
  EXPECT_NE(text.find("100% of the GEMM FLOPs in bf16)"), std::string::npos) << text;
  EXPECT_NE(text.find("energy: 0.000 J/step"), std::string::npos) << text;
  EXPECT_EQ(text.find("not available"), std::string::npos) << text;
  for (const BenchResult& r : results) {
    EXPECT_EQ(r.flops.gemm, 36222720);  // tests/graph/flops_test.cc counts it by hand
    EXPECT_GT(r.achieved_gflops, 0);
    EXPECT_GT(r.peak_gflops, 0);
    EXPECT_NEAR(r.pct_of_peak, 100.0 * r.achieved_gflops / r.peak_gflops, 1e-9);
    EXPECT_EQ(r.joules, (std::vector<double>{0.0, 0.0}));
  }
  std::ifstream in(o.json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 2u);
  for (const auto& e : j) {
    EXPECT_EQ(e["gemm_flops_per_step"], 36222720);
    EXPECT_GT(e["flops_per_step"].get<int64_t>(), 36222720);
    EXPECT_GT(e["peak_gflops_f32"].get<double>(), 0);
    EXPECT_GT(e["peak_gflops_low"].get<double>(), 0);
    EXPECT_GT(e["pct_of_peak"].get<double>(), 0);
    EXPECT_GT(e["achieved_gflops"].get<double>(), 0);
    ASSERT_TRUE(e["energy"].is_object()) << e.dump();
    EXPECT_EQ(e["energy"]["joules"].size(), 2u);
    EXPECT_EQ(e["energy"]["source"], "rapl");
    EXPECT_EQ(e["energy"]["window_seconds"].size(), 2u);
    EXPECT_DOUBLE_EQ(e["energy"]["update_period_seconds"].get<double>(), 1e-3);
  }
  // fp32's GEMMs run at the f32 peak, amp's (all bf16) at the low one.
  EXPECT_DOUBLE_EQ(j[0]["peak_gflops"].get<double>(), j[0]["peak_gflops_f32"].get<double>());
  EXPECT_DOUBLE_EQ(j[1]["peak_gflops"].get<double>(), j[1]["peak_gflops_low"].get<double>());
}

// What bench reports of a GPU's energy: finish_bench given the NVML readings of a --device
// cuda run (the readings themselves need a GPU; runtime/nvml_energy.h's tests read the fake
// NVML). Joules per step and samples per joule at the median repetition; windows under ten
// of NVML's 100 ms refreshes are flagged, with the --steps that would be long enough.
TEST(BenchTest, NvmlEnergyAndWindowsTooShortForItsRefreshes) {
  TempDir dir;
  BenchOptions o;
  o.run.model = "lenet";
  o.run.batch = 16;
  o.precisions = {"fp32", "amp"};
  o.steps = 10;
  o.json_path = dir.file("bench.json");
  BenchMachine machine;
  machine.device = "cuda:0: a GPU";
  machine.energy_source = "nvml";
  machine.energy_update_period_s = 0.1;
  std::vector<BenchResult> results(2);
  results[0].precision = "fp32";  // windows of 1.3 s and more: ten refreshes or more
  results[0].samples_per_sec = {100, 123, 110};
  results[0].joules = {30, 20, 25};
  results[0].energy_seconds = {1.6, 1.3, 1.45};
  results[1].precision = "amp";  // a 250 ms window: not reliable
  results[1].samples_per_sec = {400, 640, 330};
  results[1].joules = {4, 5, 6};
  results[1].energy_seconds = {0.4, 0.25, 0.5};
  std::ostringstream out;
  finish_bench(o, results, machine, out);
  const std::string text = out.str();
  EXPECT_TRUE(testing::contains(text, "energy: 2.500 J/step, 6.40 samples/J (NVML)\n"));
  EXPECT_TRUE(testing::contains(
      text,
      "energy: 0.500 J/step, 32.00 samples/J (NVML; not reliable: windows from 250 ms, under 10 "
      "of the counter's 100 ms refreshes; --steps 40 or more)\n"));
  EXPECT_TRUE(results[0].energy_reliable);
  EXPECT_FALSE(results[1].energy_reliable);
  std::ifstream in(o.json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 2u);
  for (const auto& e : j) {
    EXPECT_EQ(e["energy"]["source"], "nvml");
    EXPECT_DOUBLE_EQ(e["energy"]["update_period_seconds"].get<double>(), 0.1);
  }
  EXPECT_DOUBLE_EQ(j[0]["energy"]["joules_per_step"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j[0]["energy"]["samples_per_joule"].get<double>(), 6.4);
  EXPECT_EQ(j[0]["energy"]["reliable"], true);
  EXPECT_EQ(j[1]["energy"]["window_seconds"], (nlohmann::json{0.4, 0.25, 0.5}));
  EXPECT_DOUBLE_EQ(j[1]["energy"]["samples_per_joule"].get<double>(), 32);
  EXPECT_EQ(j[1]["energy"]["reliable"], false);
}

TEST(BenchTest, WithoutPeakOrEnergyCountersSaysSoOnce) {
  TempDir dir;
  BenchOptions o;
  o.run.model = "mlp";
  o.run.batch = 8;
  o.precisions = {"fp32", "amp"};
  o.steps = 1;
  o.repeats = 1;
  o.warmup = 0;
  o.measure_peak = false;
  o.powercap_root = dir.file("no-powercap");
  o.json_path = dir.file("bench.json");
  std::ostringstream out;
  run_bench(o, default_cpu_backend(), out);
  const std::string text = out.str();
  const std::string line =
      "energy: not available (no readable RAPL counters under " + o.powercap_root + ")\n";
  ASSERT_NE(text.find(line), std::string::npos) << text;
  EXPECT_EQ(text.find(line, text.find(line) + 1), std::string::npos) << text;
  EXPECT_NE(text.find("peak: not measured (--no-peak)"), std::string::npos) << text;
  EXPECT_EQ(text.find("GEMM peak"), std::string::npos) << text;
  std::ifstream in(o.json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& e : j) {
    EXPECT_TRUE(e["energy"].is_null());
    EXPECT_TRUE(e["peak_gflops_f32"].is_null());
    EXPECT_TRUE(e["pct_of_peak"].is_null());
    EXPECT_GT(e["flops_per_step"].get<int64_t>(), 0);
  }
}

BenchOptions lockstep_options(const TempDir& dir) {
  BenchOptions o;
  o.run.model = "lenet";
  o.run.batch = 8;
  o.precisions = {"fp32", "amp"};
  o.steps = 1;
  o.warmup = 1;
  o.repeats = 99;  // not used by lockstep
  o.measure_peak = false;
  o.powercap_root = dir.file("no-powercap");
  o.json_path = dir.file("lockstep.json");
  return o;
}

// The ready line, one result line per "run", then the table and the JSON of every run.
TEST(BenchTest, LockstepRunsOneRepetitionPerCommand) {
  TempDir dir;
  const BenchOptions o = lockstep_options(dir);
  std::istringstream commands("run\n\nrun\nquit\nrun\n");
  std::ostringstream protocol, out;
  auto results = run_bench_lockstep(o, default_cpu_backend(), commands, protocol, out);
  std::istringstream lines(protocol.str());
  std::string line;
  std::vector<nlohmann::json> msgs;
  while (std::getline(lines, line)) msgs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(msgs.size(), 3u) << protocol.str();
  EXPECT_EQ(msgs[0]["ready"], true);
  EXPECT_EQ(msgs[0]["framework"].get<std::string>().rfind("campo ", 0), 0u);
  EXPECT_EQ(msgs[0]["model"], "lenet");
  EXPECT_EQ(msgs[0]["precisions"], (nlohmann::json{"fp32", "amp"}));
  EXPECT_EQ(msgs[0]["gemm_flops_per_step"], 36222720 / 2);  // batch 8, not 16
  EXPECT_GT(msgs[0]["flops_per_step"].get<int64_t>(), 36222720 / 2);
  // conv 6*1*25+6, 16*6*25+16, fc 400*120+120, 120*84+84, 84*10+10
  EXPECT_EQ(msgs[0]["params"], 156 + 2416 + 48120 + 10164 + 850);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_GT(msgs[i]["samples_per_sec"]["fp32"].get<double>(), 0);
    EXPECT_GT(msgs[i]["samples_per_sec"]["amp"].get<double>(), 0);
    EXPECT_EQ(msgs[i]["samples_per_sec"].size(), 2u);
  }
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].samples_per_sec.size(), 2u);  // the run after quit is not read
  EXPECT_NE(out.str().find("1 steps x 2 interleaved repetitions"), std::string::npos) << out.str();
  std::ifstream in(o.json_path);
  EXPECT_EQ(nlohmann::json::parse(in)[0]["samples_per_sec"].size(), 2u);
}

TEST(BenchTest, LockstepRefusesAnUnknownCommandAndSurvivesNoRun) {
  TempDir dir;
  const BenchOptions o = lockstep_options(dir);
  std::istringstream bad("run\nstart\n");
  std::ostringstream protocol, out;
  try {
    run_bench_lockstep(o, default_cpu_backend(), bad, protocol, out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lockstep: unknown command 'start' on stdin"),
              std::string::npos)
        << e.what();
  }
  std::istringstream none("");
  std::ostringstream protocol2, out2;
  run_bench_lockstep(o, default_cpu_backend(), none, protocol2, out2);
  EXPECT_NE(out2.str().find("no repetition was run"), std::string::npos) << out2.str();
  std::ifstream in(o.json_path);
  EXPECT_TRUE(nlohmann::json::parse(in).empty());
}

}  // namespace
}  // namespace campo

namespace campo {
namespace {

TEST(PlanTest, CostAwarePlanShowsCostsDecisionsAndTheAmpComparison) {
  PlanOptions o;
  o.run.model = "lenet";
  o.run.batch = 16;
  o.precision = Precision::cost_aware;
  std::ostringstream out;
  print_plan(o, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("decided by"), std::string::npos) << text;
  EXPECT_NE(text.find("predicted step: cost-aware"), std::string::npos) << text;
  EXPECT_NE(text.find("2:deny"), std::string::npos) << text;
}

// Bench runs a cost-aware step next to amp. With fixed cost tables (measured costs differ
// from machine to machine) the outcome is exact: when low precision pays on the allow
// ops, cost-aware keeps amp's decisions there and needs no more casts; when it never pays,
// nothing is cast.
TEST(BenchTest, CostAwareWithFixedCostsNeedsNoMoreCastsThanAmp) {
  BenchOptions o;
  o.run.model = "lenet";
  o.run.batch = 16;
  o.steps = 2;
  o.repeats = 1;
  o.warmup = 1;
  o.guard = false;  // the plans these costs choose, not what this machine times faster
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  build_training_graph(g, vars, model_run_spec(o.run, Precision::fp32));
  const AmpLists lists = AmpLists::defaults(Device::cpu, DType::bf16);
  auto table = [&](bool pays) {
    auto t = std::make_shared<CostTable>();
    t->nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, pays ? 1.0 : 2.0});
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (pays && lists.classify(g.node(i).kind) == AmpList::allow)
        t->nodes[size_t(i)] = {100.0, 1.0};
    t->cast = CastCostModel{0.01, 1e-6};
    return t;
  };
  for (bool pays : {true, false}) {
    o.run.costs = table(pays);
    o.precisions = {"amp", "cost-aware"};
    std::ostringstream out;
    auto results = run_bench(o, default_cpu_backend(), out);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_GT(results[1].median, 0);
    if (pays) {
      EXPECT_GT(results[1].casts, 0) << out.str();
      EXPECT_LE(results[1].casts, results[0].casts) << out.str();
      // LeNet's two BF16 Conv2DBackpropFilter write their FP32 weight gradients themselves,
      // and the optimizer updates keep bf16 copies of all ten parameters (cost-aware also
      // runs the logits' BiasAdd in bf16).
      EXPECT_EQ(results[1].weight_copies, 10) << out.str();
      EXPECT_EQ(results[1].folded, 2 + 10) << out.str();
      EXPECT_EQ(results[0].folded, 0) << out.str();
      EXPECT_NE(out.str().find("(+12 folded)"), std::string::npos) << out.str();
      ASSERT_TRUE(results[1].vs_amp.has_value());
      EXPECT_FALSE(results[0].vs_amp.has_value());
      EXPECT_NE(out.str().find("of amp, paired by repetition (95% CI needs 6 or more"),
                std::string::npos)
          << out.str();
    } else {
      EXPECT_EQ(results[1].casts, 0) << out.str();
      EXPECT_EQ(results[1].low_nodes, 0) << out.str();
    }
  }
}

}  // namespace
}  // namespace campo

namespace campo {
namespace {

// Cost-aware pads only low-precision GEMMs with unaligned K/N (LeNet's 400-120-84-10
// classifier has them) and convolutions with unaligned channels (its 1-6-16), to the
// backend's alignment, and only when asked; which ones pay is measured, so only the
// invariants are checked.
TEST(PaddingPolicyTest, CostAwarePadsOnlyCandidatesAndOnlyWhenAsked) {
  ModelRunOptions run;
  run.model = "lenet";
  run.batch = 8;
  Graph probe;
  VariableStore probe_vars(1, default_cpu_backend());
  build_training_graph(probe, probe_vars, model_run_spec(run, Precision::fp32));
  auto costs = std::make_shared<CostTable>();
  costs->nodes.assign(size_t(probe.num_nodes()), NodeCost{1.0, 0.5});
  run.costs = costs;
  for (bool padding : {false, true}) {
    TrainingGraphSpec spec = model_run_spec(run, Precision::cost_aware);
    spec.precision.padding = padding;
    Graph g;
    VariableStore vars(1, default_cpu_backend());
    const TrainingGraphInfo info = build_training_graph(g, vars, spec);
    EXPECT_GT(info.padding_candidates, 0);
    int padded = 0;
    for (NodeId id = 0; id < g.num_nodes(); ++id)
      if (g.node(id).pad_to > 0) {
        ++padded;
        // A low-precision GEMM or convolution with an unaligned dimension.
        EXPECT_TRUE(is_padding_candidate(g, id, info.pad_to)) << g.node(id).name;
        EXPECT_EQ(g.node(id).pad_to, info.pad_to);
      }
    EXPECT_EQ(padded, info.padded);
    if (!padding) EXPECT_EQ(info.padded, 0);
    EXPECT_LE(info.padded, info.padding_candidates);
  }
}

// Paired ratios: b / a per repetition; the sign-test interval for the median takes the
// k-th smallest and largest ratios, k = 1 for 6-8 pairs, 4 for 15 (P(X < 4) = 1.8% for
// X ~ Binomial(15, 1/2), P(X < 5) = 5.9%), and none exists below 6 pairs.
TEST(BenchTest, PairedRatioMedianAndSignTestInterval) {
  PairedRatio p = paired_ratio({10, 10, 10, 10, 10}, {11, 9, 10.5, 12, 10});
  EXPECT_EQ(p.ratios, (std::vector<double>{1.1, 0.9, 1.05, 1.2, 1.0}));
  EXPECT_DOUBLE_EQ(p.median, 1.05);
  EXPECT_EQ(p.faster, 3);
  EXPECT_TRUE(std::isnan(p.ci_low) && std::isnan(p.ci_high));

  p = paired_ratio(std::vector<double>(6, 2.0), {2.2, 1.8, 2.1, 2.4, 2.0, 2.6});
  EXPECT_DOUBLE_EQ(p.median, 1.075);
  EXPECT_DOUBLE_EQ(p.ci_low, 0.9);
  EXPECT_DOUBLE_EQ(p.ci_high, 1.3);

  std::vector<double> a(15, 1.0), b;
  for (int i = 1; i <= 15; ++i) b.push_back(1.0 + 0.01 * i);  // ratios 1.01 .. 1.15
  p = paired_ratio(a, b);
  EXPECT_DOUBLE_EQ(p.median, 1.08);
  EXPECT_DOUBLE_EQ(p.ci_low, 1.04);
  EXPECT_DOUBLE_EQ(p.ci_high, 1.12);
  EXPECT_EQ(p.faster, 15);

  try {
    paired_ratio({1, 2}, {1});
    ADD_FAILURE() << "unequal repetition counts accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 and 1 repetitions"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace campo
