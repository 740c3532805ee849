// Recorded CUPTI activity tables (runtime/kernel_activity.cc): the input is the JSON-lines
// file. An accepted table must attribute to as many slots as its largest external id names,
// and write and read back as the same table.
#include <algorithm>

#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"
#include "runtime/kernel_activity.h"

namespace campo::fuzz {

void activity_table(const uint8_t* data, size_t size) {
  const TempInput input("activity_table", data, size);
  RecordedActivity r;
  try {
    r = read_activity_table(input.path());
  } catch (const Error&) {
    return;
  }
  uint64_t slots = 0;
  for (const ExternalCorrelation& c : r.table.correlations) slots = std::max(slots, c.external_id);
  // One slot per external id is memory: a huge id is a valid table no step would make.
  if (slots <= (uint64_t(1) << 16)) {
    try {
      attribute_kernels(r.table, size_t(slots));
    } catch (const Error&) {
      require(false, "an accepted table does not attribute");
    }
  }
  const TempInput saved("activity_table-saved", nullptr, 0);
  write_activity_table(saved.path(), r.table, r.device);
  const RecordedActivity again = read_activity_table(saved.path());
  require(again.device == r.device && again.table == r.table,
          "a written table does not read back the same");
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::activity_table)
