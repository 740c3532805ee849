// `campo bench`: training throughput of precision policies side by side (perf/bench.h), or
// driven step by step from another process (--lockstep).
#include <algorithm>
#include <iostream>
#include <sstream>

#include "perf/bench.h"
#include "perf/calibration_store.h"
#include "perf/model_run.h"
#include "runtime/check.h"
#include "runtime/path_check.h"
#include "tools/commands.h"
#include "tools/model_run_options.h"
#include "tools/options.h"
#include "train/options.h"

namespace campo::cli {

namespace {

class BenchCommand final : public Command {
 public:
  explicit BenchCommand(CLI::App& app) {
    app_ = app.add_subcommand("bench",
                              "Measure training throughput of precision policies side by side");
    BenchOptions& o = options_;
    add_model_run_options(app_, o.run, device_, optimizer_, calibration_);
    add_cuda_graph_option(app_, cuda_graph_);
    add_deterministic_option(app_, o.run.deterministic);
    app_->add_option("--precision", precisions_, "Comma-separated policies")->capture_default_str();
    app_->add_option("--steps", o.steps, "Timed steps per repetition")->capture_default_str();
    app_->add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
    app_->add_option("--repeats", o.repeats, "Interleaved repetitions")->capture_default_str();
    app_->add_option("--json", o.json_path, "Write the results as JSON")->check(kPath);
    app_->add_flag("--no-peak{false}", o.measure_peak,
                   "Skip measuring the GEMM peak (the roofline's percentages)");
    app_->add_flag("--no-guard{false}", o.guard,
                   "cost-aware: bench its plan as chosen; by default its step is first timed "
                   "against fp32's and amp's and the fastest is benched as cost-aware (the guard)");
    app_->add_flag("--lockstep", lockstep_,
                   "Driven from stdin: a JSON 'ready' line, then one repetition per 'run' "
                   "line, one JSON result line each; the table goes to stderr");
    app_->add_option("--conv-layout", conv_layout_, kConvLayoutHelp)->capture_default_str();
    add_data_parallel_options(app_, o.data_parallel,
                              "Measure the step on every rank of an MPI launch (mpirun -np N "
                              "campo bench ...), --batch samples each, gradients averaged; adds "
                              "samples/s per rank and the scaling efficiency against one process");
    add_plan_for_options(app_, o.run.plan_for);
  }

  int run() override {
    BenchOptions& o = options_;
    // Before any file is read.
    std::vector<PathUse> paths = model_run_inputs(o.run, calibration_);
    paths.push_back({"--json", o.json_path, PathUse::Kind::output_file});
    check_distinct_paths(paths);
    o.run.device = parse_device_spec(device_);
    o.run.cuda_graph = parse_cuda_graph_mode(cuda_graph_);
    o.run.conv_layout = parse_conv_layout(conv_layout_);
    check_conv_layout_applies(app_, o.run.device, o.run.model);
    default_low_precision_of(app_, o.run.device, o.run.model, o.run.mixed.low_precision);
    o.precisions.clear();
    std::stringstream ss(precisions_);
    std::string p;
    while (std::getline(ss, p, ','))
      if (!p.empty()) o.precisions.push_back(p);
    check_data_parallel_options_apply(app_, o.data_parallel);
    CAMPO_CHECK(!lockstep_ || !o.data_parallel.enabled,
                "--lockstep is driven by one orchestrator process; it does not take "
                "--data-parallel");
    CAMPO_CHECK(!lockstep_ || !given(app_, "--repeats"),
                "--repeats does not apply to --lockstep (each 'run' line on stdin runs one "
                "repetition)");
    check_bench_options(o);
    check_run_options_apply(app_, o.run, optimizer_, o.precisions);
    check_run_precision_policy(o.run, o.precisions);
    const bool cost_aware = std::count(o.precisions.begin(), o.precisions.end(), "cost-aware") > 0;
    if (cost_aware) check_calibration_device(calibration_, Precision::cost_aware, o.run.device);
    CAMPO_CHECK(cost_aware || o.guard, "--no-guard applies to the cost-aware policy; add it to "
                "--precision");
    // The run's backend, once, after the options and before any work (a calibration): one
    // line for a device this build or machine lacks.
    const std::shared_ptr<Backend> backend = backend_for(rank_device(o.run.device, o.data_parallel),
                                                         o.run.cuda_graph, o.run.deterministic);
    resolve_run_calibration(o.run, calibration_, cost_aware, backend);
    attach_predicted_costs(o.run);
    if (lockstep_) {
      // stdout carries the protocol only: the table and any banner go to stderr.
      run_bench_lockstep(o, backend, std::cin, std::cout, std::cerr);
    } else {
      run_bench(o, backend, std::cout);
    }
    return 0;
  }

 private:
  BenchOptions options_;
  bool lockstep_ = false;
  // As given; parsed once the command line is read.
  std::string device_ = "cpu", cuda_graph_ = "auto", conv_layout_ = "blocked", optimizer_,
              calibration_, precisions_ = "fp32,amp,cost-aware";
};

}  // namespace

std::unique_ptr<Command> add_bench_command(CLI::App& app) {
  return std::make_unique<BenchCommand>(app);
}

}  // namespace campo::cli
