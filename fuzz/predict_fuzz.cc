// campo predict's inputs (train/predict.cc): a profile (campo train --profile-out) predicted
// for a device of the built-in table, or a device table (--devices). The first byte picks
// which: even, the rest is a profile; odd, a device table.
#include <ostream>
#include <string>

#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"
#include "perf/predict.h"

namespace campo::fuzz {

void predict(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const TempInput input("predict", data + 1, size - 1);
  std::ostream nowhere(nullptr);
  if (data[0] % 2 == 0) {
    PredictOptions o;
    o.profile_path = input.path();
    o.device = "h100";
    reject_or_accept([&] { run_predict(o, nowhere); });
  } else {
    reject_or_accept([&] {
      for (const DeviceModel& d : parse_device_table_file(input.path()))
        nowhere << d.to_json().dump() << d.peak_for(DType::f32, false);
    });
  }
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::predict)
