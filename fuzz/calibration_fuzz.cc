// Calibration files (amp/calibration.cc): the input is the JSON file, read against a fixed
// machine identity (the seeds' own, so that accepted files reach the end of the reader).
// An accepted file must predict for each of its op models, and save and read back alike.
#include "amp/calibration.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {

// The CPU backend's fields (runtime/cpu_backend.h), so that the seeds of the format before
// BackendIdentity (logical_cores and native_bf16 as a number and a boolean) are read too.
BackendIdentity calibration_fuzz_machine() {
  BackendIdentity m;
  m.kind = "cpu";
  m.fields = {{"cpu_model", "fuzz cpu"},
              {"logical_cores", "2"},
              {"onednn_isa", "avx2"},
              {"onednn_version", "3.0.0", true},
              {"native_bf16", "false"}};
  return m;
}

void calibration(const uint8_t* data, size_t size) {
  TempInput input("calibration", data, size);
  Calibration cal;
  const CalibrationCheck check =
      read_calibration(input.path(), calibration_fuzz_machine(), cal, kCalibrationFuzzCampoVersion);
  require(check.problem != CalibrationProblem::none || check.message.empty(),
          "an accepted calibration came with a message");
  if (check.problem != CalibrationProblem::none) {
    require(!check.message.empty(), "a refused calibration came without a message");
    return;
  }
  NodeFeatures features{};
  features.fill(1.0);
  for (const auto& [key, model] : cal.ops) {
    NodeShape shape;  // every dimension 1, of the op's family (a shape fit needs one)
    shape.family = shape_family_of(*parse_op_kind(key.substr(0, key.find(':'))));
    shape.dims.fill(1.0);
    model.predict_low_ms(features, 1.0, &shape);
  }

  TempInput saved("calibration-saved", nullptr, 0);
  save_calibration(cal, saved.path());
  Calibration again;
  const CalibrationCheck reread = read_calibration(saved.path(), calibration_fuzz_machine(), again,
                                                   kCalibrationFuzzCampoVersion);
  require(reread.problem == CalibrationProblem::none, "a saved calibration does not read back");
  require(again.ops.size() == cal.ops.size(), "a saved calibration lost op models");
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::calibration)
