// `campo plan`: show, per node of a model's training step, the precision a policy chooses.
#include <iostream>

#include "models/models.h"
#include "perf/calibration_store.h"
#include "perf/model_run.h"
#include "perf/plan.h"
#include "runtime/check.h"
#include "runtime/path_check.h"
#include "tools/commands.h"
#include "tools/model_run_options.h"
#include "tools/options.h"

namespace campo::cli {

namespace {

class PlanCommand final : public Command {
 public:
  explicit PlanCommand(CLI::App& app) {
    app_ = app.add_subcommand(
        "plan", "Show, per node of the training step, the precision a policy chooses");
    PlanOptions& o = options_;
    add_model_run_options(app_, o.run, device_, optimizer_, calibration_);
    app_->add_option("--precision", precision_, "cost-aware, amp or fp32")->capture_default_str();
    app_->add_option("--dot", o.dot_path,
                     "Write a Graphviz DOT file, nodes coloured by precision, casts in red")
        ->check(kPath);
    app_->add_option("--json", o.json_path, "Write the plan as JSON")->check(kPath);
    app_->add_flag("--all-nodes", o.all_nodes,
                   "Also list variables, placeholders and optimizer updates");
    add_plan_for_options(app_, o.run.plan_for);
    app_->add_flag("--allow-fp8", o.run.mixed.allow_fp8,
                   "cost-aware: GEMMs may also run on FP8 operands (E4M3/E5M2, delayed scaling) "
                   "where the device has FP8 GEMMs and they pay, quantization included");
    app_->add_option("--numerics", o.numerics_path,
                     "A run's --metrics file with --numerics records: mark each node with what "
                     "its operands' casts lost and list the nodes that lose most")
        ->check(kPath);
    app_->add_option("--alloc-trace", o.alloc_trace_path,
                     "Write the step's allocations, one buffer per value, as a trace for "
                     "allocator tests")
        ->check(kPath);
  }

  int run() override {
    PlanOptions& o = options_;
    // Before any file is read.
    std::vector<PathUse> paths = model_run_inputs(o.run, calibration_);
    paths.push_back({"--numerics", o.numerics_path, PathUse::Kind::input_file});
    for (const std::string& dot : plan_dot_files(o))
      paths.push_back({"--dot", dot, PathUse::Kind::output_file});
    paths.push_back({"--json", o.json_path, PathUse::Kind::output_file});
    paths.push_back({"--alloc-trace", o.alloc_trace_path, PathUse::Kind::output_file});
    check_distinct_paths(paths);
    resolve_plan_for_device(app_, o.run.plan_for, device_);
    o.run.device = parse_device_spec(device_);
    default_low_precision_of(app_, o.run.device, o.run.model, o.run.mixed.low_precision);
    o.precision = parse_precision(precision_);
    check_run_options_apply(app_, o.run, optimizer_, {precision_});
    CAMPO_CHECK(!o.run.mixed.allow_fp8 || o.precision == Precision::cost_aware,
                "--allow-fp8 applies to --precision cost-aware only (FP8 by rule: "
                "--precision-policy with a format fp8 rule)");
    CAMPO_CHECK(!o.run.mixed.allow_fp8 || step_graph_count(o.run.model) == 1,
                "--allow-fp8 plans models of one step graph (classifiers and BERT), not ",
                o.run.model);
    check_plan_options(o);
    load_plan_numerics(o);  // before a calibration or a graph is built
    check_run_precision_policy(o.run, {precision_});
    check_calibration_device(calibration_, o.precision, o.run.device);
    resolve_run_calibration(o.run, calibration_, o.precision == Precision::cost_aware);
    attach_predicted_costs(o.run);
    print_plan(o, std::cout);
    return 0;
  }

 private:
  PlanOptions options_;
  // As given; parsed once the command line is read.
  std::string device_ = "cpu", optimizer_, calibration_, precision_ = "cost-aware";
};

}  // namespace

std::unique_ptr<Command> add_plan_command(CLI::App& app) {
  return std::make_unique<PlanCommand>(app);
}

}  // namespace campo::cli
