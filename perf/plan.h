// `campo plan`: the precision a policy chooses for every node of a model's training step,
// with its costs, casts and totals (a table, JSON, Graphviz DOT, the allocation trace).
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "perf/model_run.h"
#include "perf/numerics_file.h"

namespace campo {

struct PlanOptions {
  ModelRunOptions run;
  Precision precision = Precision::cost_aware;  // --precision (parse_precision)
  std::string dot_path;                         // write Graphviz DOT here when set
  std::string json_path;                        // write the per-node plan as JSON here when set
  bool all_nodes = false;  // also list variables, placeholders and optimizer updates
  // Write the step's allocation trace here when set (graph/memory_plan.h, allocation_trace):
  // the variables, inputs and weight copies, then one buffer per planned value.
  std::string alloc_trace_path;
  // --numerics FILE: a run's --metrics file whose numerics records mark, per node, what its
  // operands' casts lost, and the nodes that lose most (read by load_plan_numerics).
  std::string numerics_path;
  std::shared_ptr<const NumericsSummary> numerics;
};

// The options that need no graph (numbers, the policy names, that the output files can be
// written), checked before a calibration or a graph is built; print_plan checks them too.
void check_plan_options(const PlanOptions& o);
// The files --dot writes: its path, or for dcgan one per step graph ("_d" and "_g" before
// the extension); none without --dot.
std::vector<std::string> plan_dot_files(const PlanOptions& o);

// Reads --numerics FILE into o.numerics (one error line for a bad file); nothing without one.
void load_plan_numerics(PlanOptions& o);

// Builds the training graph, applies the policy and prints the plan table and totals.
void print_plan(const PlanOptions& o, std::ostream& out);
}  // namespace campo
