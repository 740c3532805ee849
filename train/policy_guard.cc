#include "train/policy_guard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "runtime/check.h"
#include "runtime/timer.h"

namespace campo {

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * fraction);
  return buf;
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.2f" : "%.1f", ms);
  return buf;
}

}  // namespace

GuardVerdict decide_guard(std::vector<GuardCandidate> candidates, const GuardOptions& g) {
  CAMPO_CHECK(!candidates.empty() && candidates[0].policy == "cost-aware",
              "internal: the guard decides for cost-aware's plan first");
  GuardVerdict v;
  v.ran = true;
  double spread = 0;
  for (GuardCandidate& c : candidates) {
    CAMPO_CHECK(!c.ms.empty(), "internal: ", c.policy, " has no timed step");
    c.median_ms = quantile(c.ms, 0.5);
    c.spread = c.median_ms > 0 ? (quantile(c.ms, 0.75) - quantile(c.ms, 0.25)) / c.median_ms : 0;
    spread = std::max(spread, c.spread);
  }
  v.margin = std::max(g.min_margin, 2 * spread);
  const GuardCandidate& chosen = candidates[0];
  const GuardCandidate* best = &chosen;
  for (const GuardCandidate& c : candidates)
    if (c.median_ms < best->median_ms) best = &c;
  if (best != &chosen && best->median_ms < chosen.median_ms * (1 - v.margin)) v.kept = best->policy;
  v.candidates = std::move(candidates);
  return v;
}

std::string GuardVerdict::line() const {
  if (!ran) return "guard: not run (" + skipped + ")";
  const GuardCandidate& chosen = candidates[0];
  std::string others;
  for (size_t i = 1; i < candidates.size(); ++i)
    others += (others.empty() ? "" : ", ") + candidates[i].policy + " " +
              ms_text(candidates[i].median_ms);
  if (!amp_same_plan.empty()) others += (others.empty() ? "" : ", ") + amp_same_plan;
  const std::string timed = std::to_string(chosen.ms.size()) + " interleaved steps each, margin " +
                            percent(margin) +
                            (with_rules ? "; fp32 and amp with the --precision-policy rules" : "");
  if (kept == "cost-aware")
    return "guard: cost-aware kept (" + ms_text(chosen.median_ms) + " ms a step; " + others + "; " +
           timed + ")";
  const GuardCandidate* winner = nullptr;
  for (const GuardCandidate& c : candidates)
    if (c.policy == kept) winner = &c;
  return "guard: " + kept + " replaces the cost-aware plan, which was slower (" +
         ms_text(chosen.median_ms) + " ms a step against " + ms_text(winner->median_ms) + "; " +
         others + "; " + timed + ")";
}

nlohmann::json GuardVerdict::json() const {
  nlohmann::json j = {{"ran", ran}};
  if (!ran) {
    j["skipped"] = skipped;
    return j;
  }
  j["kept"] = kept;
  j["margin"] = margin;
  nlohmann::json c = nlohmann::json::object();
  for (const GuardCandidate& k : candidates)
    c[k.policy] = {{"median_ms", k.median_ms}, {"spread", k.spread}, {"steps", k.ms.size()}};
  j["candidates"] = c;
  if (!amp_same_plan.empty()) j["amp"] = amp_same_plan;
  if (with_rules) j["with_rules"] = true;
  return j;
}

GuardVerdict guard_cost_aware(const SessionSpec& spec, const SessionFactory& make,
                              const GuardOptions& g) {
  CAMPO_CHECK(spec.graph.precision.policy == Precision::cost_aware,
              "internal: the guard times a cost-aware plan");
  CAMPO_CHECK(g.steps > 0 && g.warmup >= 0, "internal: guard steps ", g.steps);
  struct Timed {
    std::string policy;
    std::unique_ptr<Session> session;
  };
  std::vector<Timed> plans;
  plans.push_back({"cost-aware", make(spec)});
  Session& chosen = *plans[0].session;
  SessionSpec other = spec;
  other.step_costs.clear();
  other.graph.precision.costs = nullptr;
  other.graph.precision.f16_costs = nullptr;
  other.graph.precision.calibration = nullptr;
  other.graph.precision.policy = Precision::fp32;
  plans.push_back({"fp32", make(other)});
  other.graph.precision.policy = Precision::amp;
  std::unique_ptr<Session> amp = make(other);
  std::string amp_same_plan;
  const PrecisionSummary a = amp->precision_summary(), c = chosen.precision_summary();
  if (a.low_nodes == c.low_nodes && a.f16_nodes == c.f16_nodes && a.casts.casts == c.casts.casts)
    amp_same_plan = "amp's plan is cost-aware's";
  else
    plans.push_back({"amp", std::move(amp)});
  const std::vector<StepGraph> chosen_graphs = chosen.step_graphs();

  // One random batch per plan (the same draws), every model of an array on it, rate 0.
  std::vector<Batch> batches;
  for (const Timed& t : plans) {
    Rng rng(spec.models.seed.empty() ? 0 : spec.models.seed[0]);
    batches.push_back(t.session->random_batch(rng));
  }
  std::vector<GuardCandidate> candidates(plans.size());
  for (int round = 0; round < g.warmup + g.steps; ++round) {
    for (size_t i = 0; i < plans.size(); ++i) {
      Session& s = *plans[i].session;
      const std::vector<const Batch*> feed(size_t(s.models()), &batches[i]);
      const std::vector<float> lr(size_t(s.models()), 0.0f);
      Timer t;
      (void)s.step_models(feed, lr, {});  // reads the losses: the step has finished
      if (round >= g.warmup) candidates[i].ms.push_back(t.milliseconds());
    }
  }
  for (size_t i = 0; i < plans.size(); ++i) candidates[i].policy = plans[i].policy;
  GuardVerdict v = decide_guard(std::move(candidates), g);
  v.amp_same_plan = amp_same_plan;
  v.with_rules = spec.graph.precision.rules != nullptr;
  for (const StepGraph& s : chosen_graphs) v.step_costs.push_back(s.costs);
  v.f16_costs = chosen_graphs[0].f16_costs;
  return v;
}

GuardVerdict guard_run(const SessionSpec& spec, const SessionFactory& make,
                       const std::string& not_run_because, std::ostream& log,
                       const GuardOptions& g) {
  GuardVerdict v;
  if (spec.graph.precision.policy != Precision::cost_aware) return v;  // nothing to report
  v.skipped = not_run_because;
  if (v.skipped.empty() && spec.data_parallel.on())
    v.skipped = "--data-parallel: each rank would time its own verdict";
  if (!v.skipped.empty()) {
    log << v.line() << "\n";
    return v;
  }
  log << "guard: timing the cost-aware plan against fp32 and amp (" << g.warmup + g.steps
      << " interleaved steps each, learning rate 0)\n"
      << std::flush;
  v = guard_cost_aware(spec, make, g);
  log << v.line() << "\n";
  return v;
}

void apply_guard(SessionSpec& spec, const GuardVerdict& verdict) {
  PrecisionConfig& p = spec.graph.precision;
  if (!verdict.ran) return;
  if (verdict.kept != "cost-aware") {
    p.policy = parse_precision(verdict.kept);
    p.costs = nullptr;
    p.f16_costs = nullptr;
    p.calibration = nullptr;
    spec.step_costs.clear();
    return;
  }
  if (verdict.step_costs.size() == 1) {
    p.costs = verdict.step_costs[0];
    p.f16_costs = verdict.f16_costs;
  } else {
    spec.step_costs = verdict.step_costs;
  }
}

}  // namespace campo
