// cost-aware's measured guard: the promise that a cost-aware step is never slower than the
// better of fp32 and amp, kept by measurement rather than by prediction (a calibration made
// on a busy machine, or a cost model that misses a kernel, can choose a plan slower than
// both). Before a run's session is built, its cost-aware plan is made (the profiling step
// as usual) and a session of it, one of the all-fp32 plan and one of amp's (where amp's
// plan differs) are built from the same spec and timed step by step, interleaved, on one
// random batch at learning rate 0. When another plan's median step beats the chosen plan's
// by more than the noise of the timings, the run uses that policy instead and says so; the
// timing sessions are then dropped and the run's own session is built once, from the
// chosen plan's costs (no second profiling step) or with the faster policy.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/session.h"

namespace campo {

struct GuardOptions {
  int warmup = 1;  // untimed steps of each plan first
  int steps = 5;   // timed steps of each plan, interleaved
  // The smallest margin a faster plan must win by, as a fraction of the chosen plan's
  // median step; the margin used is the larger of this and twice the timings' spread.
  double min_margin = 0.03;
};

// One plan's timed steps.
struct GuardCandidate {
  std::string policy;  // "cost-aware", "fp32" or "amp"
  std::vector<double> ms;
  double median_ms = 0;
  double spread = 0;  // interquartile range over the median
};

struct GuardVerdict {
  bool ran = false;
  std::string skipped;  // why it did not run ("" when it ran, or was not for it)
  std::string kept = "cost-aware";
  std::vector<GuardCandidate> candidates;  // cost-aware's first
  double margin = 0;                       // the relative margin applied
  std::string amp_same_plan;               // amp left out: its plan is cost-aware's ("" otherwise)
  // --precision-policy: the fp32 and amp plans timed kept the rules' nodes in their formats
  // (apply_policy), as the cost-aware plan does, so a replacement keeps them too.
  bool with_rules = false;
  // cost-aware's plan, kept: the costs of each step graph, so that the run's session is
  // built from them without a second profiling step.
  std::vector<std::shared_ptr<const CostTable>> step_costs;
  std::shared_ptr<const CostTable> f16_costs;
  // "guard: cost-aware kept (12.3 ms a step; fp32 13.1, amp 15.0; 5 interleaved steps
  // each, margin 3%)", or "guard: fp32 replaces the cost-aware plan (...)".
  std::string line() const;
  nlohmann::json json() const;
  // Whether a run reports it (line, JSON): a cost-aware run's, run or not.
  bool reported() const { return ran || !skipped.empty(); }
};

// The decision alone, from timed steps (candidates[0] is cost-aware's): which policy is
// kept and the margin it used. Pure, so that it can be tested on recorded timings.
GuardVerdict decide_guard(std::vector<GuardCandidate> candidates, const GuardOptions& g);

// How the guard builds a session of a spec: the run's own kind of session (make_session,
// or the one session class a run's driver knows).
using SessionFactory = std::function<std::unique_ptr<Session>(const SessionSpec&)>;

// Builds, times and decides (see the file comment); `spec` is the run's, with cost-aware
// precision. Returns the verdict; apply_guard(spec, verdict) then gives the run's spec.
GuardVerdict guard_cost_aware(const SessionSpec& spec, const SessionFactory& make,
                              const GuardOptions& g);
// A run's guard: runs it where it applies (cost-aware, `not_run_because` empty, one process)
// and prints its line to `log`; otherwise a verdict that says why not (`not_run_because`,
// e.g. "--no-guard", or --data-parallel), printed too; for a policy other than cost-aware,
// nothing (not reported()).
GuardVerdict guard_run(const SessionSpec& spec, const SessionFactory& make,
                       const std::string& not_run_because, std::ostream& log,
                       const GuardOptions& g = {});

// The run's spec after the verdict: cost-aware's costs attached (graph.precision.costs for
// one step graph, step_costs for several), or the faster policy.
void apply_guard(SessionSpec& spec, const GuardVerdict& verdict);

}  // namespace campo
