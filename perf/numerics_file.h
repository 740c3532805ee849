// campo plan --numerics FILE: what a run's --numerics records (train/metrics_log.h's
// "numerics" lines of its --metrics file) say each node's casts lose, for the plan to mark the
// nodes whose operands lose most.
//
// Per recorded tensor (node, operand): the mean over its recorded steps of the fraction of
// elements flushed to zero (underflow) and of those clamped or overflowed (saturated +
// overflow), and the NaN and inf inputs counted. A node's figures are those of its operand
// that loses most (underflow + saturated + overflow).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace campo {

struct TensorLoss {
  std::string operand, pass, format;  // as recorded: "a", "forward", "e4m3"
  double underflow = 0;               // mean fraction flushed to zero
  double saturated = 0;               // mean fraction clamped to max, or overflowed to inf/NaN
  int64_t nan = 0, inf = 0;           // NaN and inf inputs, over every recorded step
  int64_t steps = 0;                  // steps recorded
  double lost() const { return underflow + saturated; }
};

struct NumericsSummary {
  std::string path;
  int64_t records = 0, first_step = 0, last_step = 0;
  std::map<std::string, TensorLoss> nodes;  // by node name: its operand that loses most
};

// Reads the numerics records of a --metrics file (other lines are passed over). One error line
// for a missing, unreadable or malformed file, a malformed numerics record, or a file with
// none.
NumericsSummary read_numerics_file(const std::string& path);

// Of `nodes` (a plan's node names), those the summary has that lose anything, most first (ties
// by name), at most `count`.
std::vector<std::string> nodes_losing_most(const NumericsSummary& s,
                                           const std::vector<std::string>& nodes, size_t count);

// "a fwd e4m3: underflow 1.25%, saturated 0%" (and the NaN/inf inputs when any).
std::string describe_loss(const TensorLoss& t);

}  // namespace campo
