// campo plan --numerics FILE (perf/numerics_file.cc): the input is a --metrics JSON-lines file.
// An accepted file holds at least one numerics record, in steps that are in order, and every
// node's figures are means of fractions of its elements (an element counted once at most) over
// at least one step, which plan can describe.
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"
#include "perf/numerics_file.h"

namespace campo::fuzz {

void numerics_file(const uint8_t* data, size_t size) {
  const TempInput input("numerics_file", data, size);
  NumericsSummary s;
  try {
    s = read_numerics_file(input.path());
  } catch (const Error&) {
    return;
  }
  require(s.records > 0 && !s.nodes.empty() && s.first_step <= s.last_step,
          "an accepted file has no records, or its steps are out of order");
  for (const auto& [node, t] : s.nodes) {
    require(t.steps > 0 && t.underflow >= 0 && t.saturated >= 0 && t.lost() <= 1.0 + 1e-6,
            "an accepted node's figures are not fractions of its elements");
    require(t.nan >= 0 && t.inf >= 0, "an accepted node counts negative NaN or inf inputs");
    require(!describe_loss(t).empty(), "an accepted node has no description");
  }
  std::vector<std::string> names;
  for (const auto& [node, t] : s.nodes) names.push_back(node);
  require(nodes_losing_most(s, names, 5).size() <= 5, "more nodes lose most than asked for");
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::numerics_file)
