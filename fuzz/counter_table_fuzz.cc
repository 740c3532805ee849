// Recorded hardware-counter tables (runtime/hardware_counters.cc): the input is the
// JSON-lines file. An accepted table must hold only finite, non-negative counters and
// positive times, and write and read back as the same table.
#include <cmath>

#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"
#include "runtime/hardware_counters.h"

namespace campo::fuzz {

namespace {

// Equal, unread counters (NaN) counting as equal.
bool same(const CounterTable& a, const CounterTable& b) {
  if (a.device != b.device || a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const NodeCounters &x = a.nodes[i], &y = b.nodes[i];
    if (x.node != y.node || x.fp32_ms != y.fp32_ms || x.low_ms != y.low_ms) return false;
    for (int c = 0; c < kNumCounters; ++c) {
      const double u = x.values[size_t(c)], v = y.values[size_t(c)];
      if (!(u == v || (std::isnan(u) && std::isnan(v)))) return false;
    }
  }
  return true;
}

}  // namespace

void counter_table(const uint8_t* data, size_t size) {
  const TempInput input("counter_table", data, size);
  CounterTable t;
  try {
    t = read_counter_table(input.path());
  } catch (const Error&) {
    return;
  }
  for (const NodeCounters& n : t.nodes) {
    for (double v : n.values)
      require(std::isnan(v) || (std::isfinite(v) && v >= 0),
              "an accepted table holds a negative or infinite counter");
    require((n.fp32_ms == -1 || n.fp32_ms > 0) && (n.low_ms == -1 || n.low_ms > 0),
            "an accepted table holds a time that is not positive");
  }
  const TempInput saved("counter_table-saved", nullptr, 0);
  write_counter_table(saved.path(), t);
  require(same(read_counter_table(saved.path()), t), "a written table does not read back the same");
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::counter_table)
