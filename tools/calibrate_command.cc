// `campo calibrate`: fit this machine's cost models for cost-aware (perf/calibrate.h), or with
// --check, tell whether a calibration still fits this machine (perf/calibration_check.h).
#include <iostream>
#include <sstream>

#include "perf/calibrate.h"
#include "perf/calibration_check.h"
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
        "once per machine and device; the file is keyed by the device's identity); with "
        "--check, tell whether a calibration still fits this machine");
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
                     "vgg16, dcgan, attention: BERT's batched attention products); with "
                     "--check, the ones re-timed (default lenet,resnet18,dcgan,attention)");
    app_->add_option("--batches", batches_,
                     "Only these batch sizes (comma-separated); with --check, the one batch "
                     "size re-timed (default 4)");
    app_->add_option("--max-load", o.noise.max_load_fraction,
                     "Noise limit: the CPU other processes may use while a measurement runs, "
                     "as a fraction of the cores (default 0.25); past it the measurement is "
                     "redone, and the calibration refused if it stays so");
    app_->add_option("--max-spread", max_spread_percent_,
                     "Noise limit: how far a measurement's repeated steps may lie from its "
                     "fastest, (median - fastest) / fastest in percent (default 10)");
    app_->add_option("--max-shape-spread", max_shape_spread_percent_,
                     "Noise limit: the mean deviation of identical shapes' times from their "
                     "median, in percent (default 25)");
    app_->add_option("--retries", o.noise.retries,
                     "Times a too noisy measurement is redone before the calibration is "
                     "refused (default 2)");
    app_->add_option("--repeats", o.noise.repeats,
                     "Timed steps of each measurement, whose spread is judged (default 5)");
    app_->add_flag("--check", check_,
                   "Re-time a few configurations and say whether the calibration (this "
                   "machine's, or --calibration) still fits: exit 0 fits, 2 does not, 3 "
                   "cannot tell (the machine was busy)");
    app_->add_option("--compare-fits", compare_fits_,
                     "Measure nothing: fit the op models of a --samples file again in each form "
                     "(linear features, shape features, shape table) and print their held-out "
                     "errors per op model, before and after")
        ->check(kPath);
    app_->add_option("--calibration", calibration_,
                     "With --check: the calibration file to check (default: this machine's)")
        ->check(kPath);
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
    std::stringstream bs(batches_);
    while (std::getline(bs, m, ',')) {
      if (m.empty()) continue;
      size_t used = 0;
      long long b = 0;
      try {
        b = std::stoll(m, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      CAMPO_CHECK(used == m.size() && b > 0, "--batches expects positive whole numbers, got '", m,
                  "'");
      o.batches.push_back(b);
    }
    CAMPO_CHECK(!app_->count("--batches") || !o.batches.empty(),
                "--batches needs at least one batch size");
    o.noise.max_spread = max_spread_percent_ / 100;
    o.noise.max_shape_spread = max_shape_spread_percent_ / 100;
    if (!compare_fits_.empty()) {
      for (const char* option :
           {"--out", "--budget-minutes", "--low-precision", "--quick", "--samples", "--counters",
            "--models", "--batches", "--max-load", "--max-spread", "--max-shape-spread",
            "--retries", "--repeats", "--check", "--calibration"})
        CAMPO_CHECK(!given(app_, option), option,
                    " does not apply to --compare-fits (it fits a samples file again, measures "
                    "and writes nothing)");
      compare_fits(compare_fits_, std::cout);
      return 0;
    }
    if (check_) return run_check();
    CAMPO_CHECK(!given(app_, "--calibration"),
                "--calibration applies to --check only (a calibration run writes --out)");
    check_distinct_paths({{"--out", o.out, PathUse::Kind::output_file},
                          {"--samples", o.samples_out, PathUse::Kind::output_file},
                          {"--counters", o.counters_out, PathUse::Kind::output_file}});
    run_calibration(o, std::cout);
    return 0;
  }

 private:
  int run_check() {
    const CalibrateOptions& o = options_;
    for (const char* option : {"--out", "--budget-minutes", "--low-precision", "--quick",
                               "--samples", "--counters", "--max-shape-spread"})
      CAMPO_CHECK(!given(app_, option), option,
                  " does not apply to --check (it re-times, fits nothing and writes nothing)");
    CAMPO_CHECK(o.batches.size() <= 1, "--check re-times one batch size, got ", o.batches.size());
    CalibrationCheckOptions c;
    c.device = o.device;
    c.calibration = calibration_;
    if (!o.models.empty()) c.models = o.models;
    if (!o.batches.empty()) c.batch = o.batches[0];
    c.noise = o.noise;
    CAMPO_CHECK(c.noise.max_load_fraction > 0 && c.noise.max_spread > 0,
                "--max-load and --max-spread must be positive");
    CAMPO_CHECK(c.noise.retries >= 0 && c.noise.retries <= 10, "--retries must be 0 to 10, got ",
                c.noise.retries);
    CAMPO_CHECK(c.noise.repeats >= 3 && c.noise.repeats <= 1000,
                "--repeats must be 3 to 1000, got ", c.noise.repeats);
    return int(check_calibration_fit(c, std::cout).verdict);
  }

  CalibrateOptions options_;
  std::string device_ = "cpu", models_, batches_, calibration_, compare_fits_;  // as given
  double max_spread_percent_ = 10, max_shape_spread_percent_ = 25;
  bool check_ = false;
};

}  // namespace

std::unique_ptr<Command> add_calibrate_command(CLI::App& app) {
  return std::make_unique<CalibrateCommand>(app);
}

}  // namespace campo::cli
