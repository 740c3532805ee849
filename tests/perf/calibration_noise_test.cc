// A calibration that cannot be silently wrong (issue 50), through the commands a user runs:
// a calibration beside busy processes is redone or refused, never cached silently; `calibrate
// --check` says fit for a file just made and misfit for one whose costs were scaled x10; the
// profiling step of a run given that doctored file says in one line that it does not trust it,
// records it in the result JSON and times both precisions. Plus the rules themselves on
// made-up numbers.
//
// Robust on a loaded CI machine (ctest -j2 runs another suite beside this one): the load
// generator here is three busy processes on this process's cores (well past any limit), the
// calibrations these tests must accept are made with the limits raised (--max-load etc.), and
// `--check` of a fresh file may answer "cannot tell" (exit 3) when the machine was busy,
// but never misfit.
#include "perf/calibration_noise.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "amp/calibration.h"
#include "perf/calibrate.h"
#include "perf/calibration_store.h"
#include "tests/amp/calibration_test_util.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("campo_noise_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// Busy processes (pure spin loops, forked: nothing shared with this process's threads), one
// more than this process's cores, killed when it ends.
class LoadGenerator {
 public:
  LoadGenerator() {
    const int cores = std::max(1, cpu_snapshot().cores);
    for (int i = 0; i <= cores; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid > 0) children_.push_back(pid);
    }
    // Let them be scheduled before anything is measured.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ~LoadGenerator() {
    for (pid_t pid : children_) kill(pid, SIGKILL);
    for (pid_t pid : children_) waitpid(pid, nullptr, 0);
  }
  size_t size() const { return children_.size(); }

 private:
  std::vector<pid_t> children_;
};

// ---- the rules ----

TEST(CalibrationNoiseTest, RepeatSpreadLoadAndTheFitRule) {
  EXPECT_DOUBLE_EQ(repeat_spread({}), 0.0);
  EXPECT_DOUBLE_EQ(repeat_spread({2.0}), 0.0);
  EXPECT_DOUBLE_EQ(repeat_spread({1.0, 1.1, 1.0, 1.3, 1.0}), 0.0);  // median = fastest
  EXPECT_NEAR(repeat_spread({1.0, 1.5, 1.2, 2.0, 1.4}), 0.4, 1e-12);
  NoiseLimits limits;  // 0.25 of the cores, 10%
  EXPECT_EQ(noise_problem(0.1, 2, 0.05, limits), "");
  EXPECT_EQ(noise_problem(-1, 2, 0.05, limits), "");  // load unknown: judged by spread alone
  EXPECT_EQ(noise_problem(1.3, 2, 0.05, limits),
            "other processes used 1.30 of 2 cores (limit 0.50)");
  EXPECT_EQ(noise_problem(0.1, 2, 0.23, limits), "its repeated steps spread 23% (limit 10%)");
  // Others' CPU is the busy time less ours, per wall second.
  CpuSnapshot a{.known = true, .busy_s = 10, .own_s = 4, .wall_s = 100, .cores = 2};
  CpuSnapshot b{.known = true, .busy_s = 13, .own_s = 5, .wall_s = 101, .cores = 2};
  EXPECT_DOUBLE_EQ(foreign_load(a, b), 2.0);
  b.busy_s = 11.5;
  EXPECT_DOUBLE_EQ(foreign_load(a, b), 0.5);
  b.known = false;
  EXPECT_DOUBLE_EQ(foreign_load(a, b), -1.0);

  // Measured / predicted: median and total within 0.5x..2x over 5 nodes or more.
  EXPECT_FALSE(agreement_of({1, 1, 1, 1}, {1, 1, 1, 1}).checked());
  EXPECT_TRUE(agreement_of({1, 1, 1, 1, 1}, {1.1, 0.9, 1, 1, 1.2}).fits());
  const Agreement tenfold = agreement_of({1, 1, 1, 1, 1}, {10, 10, 10, 10, 10});
  EXPECT_TRUE(tenfold.checked());
  EXPECT_FALSE(tenfold.fits());
  EXPECT_DOUBLE_EQ(tenfold.median_ratio, 0.1);
  // One huge node off by 3x moves the total, not the median: both must hold.
  EXPECT_FALSE(agreement_of({30, 1, 1, 1, 1}, {10, 1, 1, 1, 1}).fits());
  // Nodes under the timer's resolution are left out.
  EXPECT_EQ(agreement_of({0.001, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}).nodes, 5);
}

// A file without the noise record and f32 models (every file made before them) loads, and
// says so; the profiling step cannot check it and says that.
TEST(CalibrationNoiseTest, OldFilesLoadAndSayTheyCarryNoNoiseRecord) {
  testing::TempFile f("old.json");
  save_calibration(testing::sample_calibration(), f.path);
  {
    nlohmann::json j;
    std::ifstream(f.path) >> j;
    ASSERT_FALSE(j.contains("made"));
    j.erase("f32_ops");  // as an old campo wrote it
    std::ofstream(f.path) << j.dump();
  }
  const Calibration cal = load_calibration(f.path, *default_cpu_backend());
  EXPECT_FALSE(cal.record.recorded);
  EXPECT_TRUE(cal.f32_ops.empty());
  EXPECT_EQ(describe_record(cal.record),
            "no noise record (made before campo recorded load and spread)");
  const CalibrationFit fit = calibration_fit(Agreement{}, cal);
  EXPECT_EQ(fit.verdict, CalibrationFit::Verdict::unchecked);
  EXPECT_NE(fit.line.find("has no f32 models"), std::string::npos) << fit.line;
  // --check says it too.
  const CliResult r = run_cli({"calibrate", "--check", "--calibration", f.path, "--models", "lenet",
                               "--max-load", "100", "--max-spread", "100000"});
  EXPECT_NE(r.out.find("no noise record"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("not checked: the file has no f32 models"), std::string::npos) << r.out;
}

// A record that is there must be plausible: one line naming the field.
TEST(CalibrationNoiseTest, ImplausibleRecordsAndF32ModelsAreRefused) {
  testing::TempFile f("bad.json");
  Calibration cal = testing::sample_calibration();
  cal.record.recorded = true;
  cal.record.repeats = 5;
  cal.record.cores = 2;
  cal.f32_ops["MatMul"] = F32Model{.key = "MatMul", .per_flop_ms = 1e-8, .fixed_ms = 0.01};
  save_calibration(cal, f.path);
  Calibration back;
  ASSERT_EQ(read_calibration_file(f.path, "cpu", back).problem, CalibrationProblem::none);
  EXPECT_TRUE(back.record.recorded);
  EXPECT_EQ(back.record.repeats, 5);
  EXPECT_EQ(back.f32_ops.at("MatMul").per_flop_ms, 1e-8);
  auto refused = [&](const std::function<void(nlohmann::json&)>& doctor, const std::string& field) {
    save_calibration(cal, f.path);
    nlohmann::json j;
    std::ifstream(f.path) >> j;
    doctor(j);
    std::ofstream(f.path) << j.dump();
    Calibration out;
    const CalibrationCheck c = read_calibration_file(f.path, "cpu", out);
    EXPECT_EQ(c.problem, CalibrationProblem::corrupt) << field;
    EXPECT_NE(c.message.find(field), std::string::npos) << c.message;
  };
  refused([](nlohmann::json& j) { j["made"]["repeats"] = 0; }, "made.repeats");
  refused([](nlohmann::json& j) { j["made"]["load"] = -3; }, "made.load");
  refused([](nlohmann::json& j) { j["made"].erase("limits"); }, "made.limits");
  refused([](nlohmann::json& j) { j["f32_ops"][0]["per_flop_ms"] = -1; },
          "f32_ops[MatMul].per_flop_ms");
  refused([](nlohmann::json& j) { j["f32_ops"][0]["key"] = "NoSuchOp"; }, "NoSuchOp");
}

// ---- through the commands ----

// The calibration beside three busy processes: redone, then refused with one error line and
// nothing written (or, should the load have let up, accepted only after saying it redid a
// measurement, with the redo in the file's record: never silently).
TEST(CalibrationNoiseTest, CalibrationBesideBusyProcessesIsRedoneOrRefusedNeverCachedSilently) {
  const std::string out = temp_path("busy.json");
  fs::remove(out);
  CliResult r;
  {
    LoadGenerator load;
    ASSERT_GE(load.size(), 2u);
    r = run_cli({"calibrate", "--quick", "--models", "lenet", "--batches", "4", "--retries", "1",
                 "--out", out});
  }
  if (r.code != 0) {
    EXPECT_EQ(r.err.rfind("campo: error: calibration refused, nothing written: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("stayed too noisy in 2 attempts"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.out.find("redoing it (attempt 2 of 2)"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out));
  } else {
    EXPECT_NE(r.out.find("too noisy"), std::string::npos) << r.out;
    const Calibration cal = load_calibration(out, *default_cpu_backend());
    EXPECT_GE(cal.record.redone, 1);
  }
  EXPECT_NE(r.out.find("machine busy: other processes use"), std::string::npos) << r.out;
  fs::remove(out);
}

// The automatic calibration of a first cost-aware run looks before it starts: on a busy
// machine it does not start, and says so on the terminal with what it costs; nothing cached.
TEST(CalibrationNoiseTest, AutomaticCalibrationOnABusyMachineSaysWhatItCostsAndCachesNothing) {
  CalibrateOptions base;
  base.out = temp_path("auto.json");
  base.models = {"lenet"};
  base.batches = {4};
  fs::remove(base.out);
  std::ostringstream log;
  std::shared_ptr<const Calibration> cal;
  ::testing::internal::CaptureStderr();
  {
    LoadGenerator load;
    cal = automatic_calibration(*default_cpu_backend(), DType::bf16, log, nullptr, base);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cal, nullptr);
  EXPECT_FALSE(fs::exists(base.out));
  EXPECT_NE(log.str().find("cost-aware: machine busy: other processes use"), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("profiling step times both precisions instead"), std::string::npos)
      << log.str();
  EXPECT_NE(err.find("cost-aware: machine busy"), std::string::npos) << err;  // the terminal
}

// Quiet (here: the limits raised, as another suite may share the machine), it says on the
// terminal that it runs and for about how long, and caches the file in the cache folder,
// created on a machine that has none yet.
TEST(CalibrationNoiseTest, AutomaticCalibrationSaysItRunsAndCachesInANewFolder) {
  const fs::path cache = temp_path("cache");
  fs::remove_all(cache);
  testing::ScopedEnv env("XDG_CACHE_HOME", cache.string());
  CalibrateOptions base;
  base.models = {"lenet"};
  base.batches = {4};
  base.noise.max_load_fraction = 100;
  base.noise.max_spread = 1000;
  base.noise.max_shape_spread = 1000;
  std::ostringstream log;
  std::string path;
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const std::shared_ptr<const Calibration> cal =
      automatic_calibration(*default_cpu_backend(), DType::bf16, log, &path, base);
  ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(cal, nullptr) << log.str();
  EXPECT_EQ(path, default_calibration_path(*default_cpu_backend(), DType::bf16));
  EXPECT_TRUE(fs::exists(path));
  EXPECT_TRUE(cal->record.recorded);
  const std::string running =
      "cost-aware: no bf16 calibration of this machine: running a quick "
      "automatic calibration now, about 1 min (up to ~3 if the machine "
      "gets busy and measurements are redone), cached in " +
      path;
  EXPECT_NE(log.str().find(running), std::string::npos) << log.str();
  EXPECT_NE(err.find(running), std::string::npos) << err;  // the terminal, not only the log
  EXPECT_NE(log.str().find("cost-aware: calibrated "), std::string::npos) << log.str();
  fs::remove_all(cache);
}

// A calibration made here (limits raised: another suite may be running beside this one),
// its costs scaled x10 in a copy; --check fits the one and not the other, and a cost-aware run
// and plan given the copy say they do not trust it.
class CalibrationFitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    made_ = temp_path("fresh.json");
    doctored_ = temp_path("doctored.json");
    const CliResult r = run_cli({"calibrate", "--quick", "--models", "lenet", "--batches", "4,8",
                                 "--repeats", "9", "--max-load", "100", "--max-spread", "100000",
                                 "--max-shape-spread", "100000", "--out", made_});
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    ASSERT_NE(r.out.find("noise: 9 repeats, load "), std::string::npos) << r.out;
    nlohmann::json j;
    std::ifstream(made_) >> j;
    ASSERT_TRUE(j.contains("made")) << "the file records how it was made";
    for (const char* key : {"repeats", "load", "repeat_spread", "seconds", "date", "cpu"})
      EXPECT_TRUE(j["made"].contains(key)) << key;
    // The limits are off above so that a busy machine cannot fail the setup; whether the
    // file passed campo's own limits decides what its check may answer.
    const NoiseLimits limits;
    const nlohmann::json& made = j["made"];
    made_quietly_ = made["max_load"].get<double>() <=
                        limits.max_load_fraction * made["cores"].get<double>() &&
                    made["max_repeat_spread"].get<double>() <= limits.max_spread;
    ASSERT_FALSE(j["f32_ops"].empty());
    // Every time the file predicts, x10.
    for (auto& m : j["f32_ops"])
      for (const char* k : {"per_flop_ms", "per_byte_ms", "fixed_ms"})
        m[k] = m[k].get<double>() * 10;
    for (auto& m : j["ops"]) {
      m["sigma"] = m["sigma"].get<double>() * 10;
      // A (rare) negative intercept stays: x10 it could pass the -1 ms a file may hold.
      if (m["bias_ms"].get<double>() > 0) m["bias_ms"] = m["bias_ms"].get<double>() * 10;
      for (auto& f : m["features"]) f["weight"] = f["weight"].get<double>() * 10;
    }
    std::ofstream(doctored_) << j.dump();
  }
  static void TearDownTestSuite() {
    fs::remove(made_);
    fs::remove(doctored_);
  }
  static std::string made_, doctored_;
  static bool made_quietly_;
};
std::string CalibrationFitTest::made_, CalibrationFitTest::doctored_;
bool CalibrationFitTest::made_quietly_ = false;

TEST_F(CalibrationFitTest, CheckFitsAFileJustMadeAndNotOneWithCostsTimesTen) {
  const CliResult fresh = run_cli(
      {"calibrate", "--check", "--calibration", made_, "--models", "lenet", "--repeats", "9"});
  // Fits; or, with the machine busy while it re-timed, "cannot tell": never misfit. A file
  // made past campo's noise limits (a busy machine during the setup: OpenMP's spinning
  // threads can slow small kernels 50x) may rightly not fit.
  if (fresh.code == 3)
    EXPECT_NE(fresh.out.find("cannot tell"), std::string::npos) << fresh.out;
  else if (fresh.code == 2 && !made_quietly_)
    EXPECT_NE(fresh.out.find("calibration does NOT fit this machine"), std::string::npos)
        << fresh.out;
  else
    EXPECT_EQ(fresh.code, 0) << fresh.out << fresh.err;
  if (fresh.code == 0)
    EXPECT_NE(fresh.out.find("calibration fits this machine"), std::string::npos);
  EXPECT_NE(fresh.out.find("f32 times, measured / the file's f32 models: median"),
            std::string::npos)
      << fresh.out;

  // Ten times too slow a prediction is measured faster than it, which no load explains.
  const CliResult doctored = run_cli(
      {"calibrate", "--check", "--calibration", doctored_, "--models", "lenet", "--repeats", "9"});
  EXPECT_EQ(doctored.code, 2) << doctored.out << doctored.err;
  EXPECT_NE(doctored.out.find("calibration does NOT fit this machine"), std::string::npos)
      << doctored.out;
  EXPECT_NE(doctored.out.find(": does NOT fit"), std::string::npos) << doctored.out;
}

TEST_F(CalibrationFitTest, TheProfilingStepSaysItDoesNotTrustADoctoredCalibration) {
  const CliResult r =
      run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--epochs", "1", "--batch",
               "8", "--limit-train", "32", "--limit-test", "16", "--progress", "none",
               "--precision", "cost-aware", "--calibration", doctored_, "--no-guard"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string line =
      "cost-aware: calibration not trusted for this run: measured f32 node "
      "times / predicted median 0.";
  const size_t at = r.out.find(line);
  EXPECT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(line, at + 1), std::string::npos) << "one line: " << r.out;
  const nlohmann::json result = testing::json_event(r.out);
  ASSERT_TRUE(result.contains("calibration_check")) << r.out;
  EXPECT_EQ(result["calibration_check"]["verdict"], "misfit");
  EXPECT_LT(result["calibration_check"]["median_ratio"].get<double>(), 0.5);

  // plan says the same of its own profiling step, and how the file was made.
  const CliResult p = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision",
                               "cost-aware", "--calibration", doctored_});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("cost-aware: calibration not trusted for this run"), std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("calibration noise: 9 repeats"), std::string::npos) << p.out;
}

TEST(CalibrationNoiseTest, CheckOptionsThatDoNotApplyAreOneLine) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--out", temp_path("x.json")},
        {"--quick"},
        {"--samples", "s.json"}}) {
    std::vector<std::string> a = {"calibrate", "--check"};
    a.insert(a.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(a);
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("campo: error: " + extra[0] + " does not apply to --check", 0), 0u)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  CliResult r = run_cli({"calibrate", "--calibration", temp_path("x.json")});
  EXPECT_EQ(r.err.rfind("campo: error: --calibration applies to --check only", 0), 0u) << r.err;
  r = run_cli({"calibrate", "--batches", "4,x", "--out", temp_path("x.json")});
  EXPECT_EQ(r.err.rfind("campo: error: --batches expects positive whole numbers, got 'x'", 0), 0u)
      << r.err;
  r = run_cli({"calibrate", "--max-load", "0", "--out", temp_path("x.json")});
  EXPECT_EQ(r.err.rfind("campo: error: --max-load must be a positive fraction", 0), 0u) << r.err;
  r = run_cli({"calibrate", "--repeats", "2", "--out", temp_path("x.json")});
  EXPECT_EQ(r.err.rfind("campo: error: --repeats must be 3 to 1000", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(temp_path("x.json")));
}

}  // namespace
}  // namespace campo
