// `campo predict`: a profiled training step's time on another device (perf/predict.h).
#include <cstdio>
#include <iostream>

#include "perf/predict.h"
#include "runtime/path_check.h"
#include "tools/commands.h"
#include "tools/paths.h"

namespace campo::cli {

namespace {

class PredictCommand final : public Command {
 public:
  explicit PredictCommand(CLI::App& app) {
    app_ = app.add_subcommand(
        "predict", "Predict a profiled training step's time on another device (Habitat's scaling)");
    PredictOptions& o = options_;
    app_->add_option("--profile", o.profile_path,
                     "A per-node profile: campo train ... --profile-out FILE")
        ->check(kPath);
    app_->add_option("--device", o.device,
                     "The device to predict for, by its name in the device table");
    app_->add_option("--from", o.from,
                     "The device the profile was measured on (default: the profile's "
                     "own measurement of its CPU)");
    app_->add_option("--devices", o.devices_path,
                     "A device table to use instead of the built-in one (perf/devices.json)")
        ->check(kPath);
    app_->add_option("--json", o.json_path, "Write the prediction per node")->check(kPath);
    app_->add_option("--origin-calibration", o.origin_calibration,
                     "The calibration of the device the profile was measured on (with "
                     "--target-calibration): low-precision nodes whose ops are fitted by shape "
                     "are scaled by their shape's low/f32 ratios on each device")
        ->check(kPath);
    app_->add_option("--target-calibration", o.target_calibration,
                     "The calibration of the device predicted for (campo calibrate there)")
        ->check(kPath);
    app_->add_flag("--list-devices", list_devices_, "List the device table and exit");
  }

  int run() override {
    if (!list_devices_) {
      check_distinct_paths(
          {{"--profile", options_.profile_path, PathUse::Kind::input_file},
           {"--devices", options_.devices_path, PathUse::Kind::input_file},
           {"--origin-calibration", options_.origin_calibration, PathUse::Kind::input_file},
           {"--target-calibration", options_.target_calibration, PathUse::Kind::input_file},
           {"--json", options_.json_path, PathUse::Kind::output_file}});
      run_predict(options_, std::cout);
      return 0;
    }
    for (const DeviceModel& d : device_table(options_.devices_path)) {
      // %g: the same figures whatever an earlier command left in std::cout's format.
      char figures[96];
      std::snprintf(figures, sizeof figures, "f32 %g GFLOP/s, %g GB/s",
                    d.peak_for(DType::f32, false), d.memory_gbs);
      std::cout << d.name << ": " << d.full_name << "; " << figures << "; " << d.source << "\n";
    }
    return 0;
  }

 private:
  PredictOptions options_;
  bool list_devices_ = false;
};

}  // namespace

std::unique_ptr<Command> add_predict_command(CLI::App& app) {
  return std::make_unique<PredictCommand>(app);
}

}  // namespace campo::cli
