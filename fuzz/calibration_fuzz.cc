// Calibration files (amp/calibration.cc): the input is the JSON file, read against a fixed
// machine identity (the seeds' own, so that accepted files reach the end of the reader).
// An accepted file must predict for each of its op models, and save and read back alike.
#include "amp/calibration.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {

MachineIdentity calibration_fuzz_machine() {
  MachineIdentity m;
  m.cpu_model = "fuzz cpu";
  m.logical_cores = 2;
  m.onednn_isa = "avx2";
  m.onednn_version = "3.0.0";
  m.native_bf16 = false;
  m.campo_version = "fuzz";
  return m;
}

void calibration(const uint8_t* data, size_t size) {
  TempInput input("calibration", data, size);
  Calibration cal;
  const CalibrationCheck check = read_calibration(input.path(), calibration_fuzz_machine(), cal);
  require(check.problem != CalibrationProblem::none || check.message.empty(),
          "an accepted calibration came with a message");
  if (check.problem != CalibrationProblem::none) {
    require(!check.message.empty(), "a refused calibration came without a message");
    return;
  }
  NodeFeatures features{};
  features.fill(1.0);
  for (const auto& [key, model] : cal.ops) model.predict_low_ms(features, 1.0);

  TempInput saved("calibration-saved", nullptr, 0);
  save_calibration(cal, saved.path());
  Calibration again;
  const CalibrationCheck reread = read_calibration(saved.path(), calibration_fuzz_machine(), again);
  require(reread.problem == CalibrationProblem::none, "a saved calibration does not read back");
  require(again.ops.size() == cal.ops.size(), "a saved calibration lost op models");
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::calibration)
