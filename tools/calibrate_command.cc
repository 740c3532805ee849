// `campo calibrate`: fit this machine's cost models for cost-aware (perf/calibrate.h).
#include <iostream>
#include <sstream>

#include "perf/calibrate.h"
#include "runtime/check.h"
#include "runtime/path_check.h"
#include "tools/commands.h"
#include "tools/options.h"

namespace campo::cli {

namespace {

class CalibrateCommand final : public Command {
 public:
  explicit CalibrateCommand(CLI::App& app) {
    app_ = app.add_subcommand(
        "calibrate",
        "Fit the cost models of --device on this machine for --precision cost-aware (offline, "
        "once per machine and device; the file is keyed by the device's identity)");
    CalibrateOptions& o = options_;
    add_device_option(app_, device_);
    app_->add_option("--out", o.out,
                     "Calibration file to write (default: this machine's and device's, in "
                     "$XDG_CACHE_HOME/campo or ~/.cache/campo)")
        ->check(kPath);
    app_->add_option("--budget-minutes", o.budget_minutes,
                     "Time budget: no configuration starts that would overrun it "
                     "(default 10, 1 with --quick)");
    app_->add_option("--low-precision", o.low_precision,
                     "bf16 or fp16 (default: the device's, bf16 on cpu, fp16 on cuda)");
    app_->add_flag("--quick", o.quick,
                   "About a minute: LeNet, ResNet-18, DCGAN and BERT's attention "
                   "products at small batches");
    app_->add_option("--samples", o.samples_out,
                     "Also write the raw measurements (every node sample and cast) as JSON")
        ->check(kPath);
    app_->add_option("--counters", o.counters_out,
                     "Also write every sample's hardware counters and times as a recorded "
                     "counter table (JSON lines; devices that read counters: cuda)")
        ->check(kPath);
    app_->add_option("--models", models_,
                     "Only these models (comma-separated: lenet, resnet18, resnet50, "
                     "vgg16, dcgan, attention: BERT's batched attention products)");
  }

  int run() override {
    CalibrateOptions& o = options_;
    o.device = parse_device_spec(device_);
    // By default the low precision that runs on this device use (default_low_precision).
    if (!given(app_, "--low-precision"))
      o.low_precision = default_low_precision(o.device.type) == DType::f16 ? "fp16" : "bf16";
    std::stringstream ss(models_);
    std::string m;
    while (std::getline(ss, m, ','))
      if (!m.empty()) o.models.push_back(m);
    CAMPO_CHECK(!app_->count("--models") || !o.models.empty(),
                "--models needs at least one model name");
    check_distinct_paths({{"--out", o.out, PathUse::Kind::output_file},
                          {"--samples", o.samples_out, PathUse::Kind::output_file},
                          {"--counters", o.counters_out, PathUse::Kind::output_file}});
    run_calibration(o, std::cout);
    return 0;
  }

 private:
  CalibrateOptions options_;
  std::string device_ = "cpu", models_;  // as given
};

}  // namespace

std::unique_ptr<Command> add_calibrate_command(CLI::App& app) {
  return std::make_unique<CalibrateCommand>(app);
}

}  // namespace campo::cli
