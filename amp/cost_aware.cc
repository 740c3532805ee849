#include "amp/cost_aware.h"

#include <algorithm>
#include <functional>

#include "amp/min_cut.h"
#include "graph/optimizer.h"
#include "runtime/check.h"

namespace campo {

const char* traversal_name(Traversal t) {
  switch (t) {
    case Traversal::none: return "-";
    case Traversal::allow: return "1:allow";
    case Traversal::deny: return "2:deny";
    case Traversal::neighbour: return "3:neighbour";
    case Traversal::clear_chain: return "4:clear-chain";
    case Traversal::exact: return "5:exact";
    case Traversal::rule: return "rule";
  }
  return "?";
}

const char* verdict_name(CalibrationFit::Verdict v) {
  switch (v) {
    case CalibrationFit::Verdict::none: return "none";
    case CalibrationFit::Verdict::fits: return "fits";
    case CalibrationFit::Verdict::misfit: return "misfit";
    case CalibrationFit::Verdict::unchecked: return "unchecked";
  }
  return "?";
}

const char* search_name(CostAwareSearch s) {
  return s == CostAwareSearch::exact ? "exact" : "traversals";
}

CostAwareSearch parse_search(const std::string& s) {
  if (s == "exact") return CostAwareSearch::exact;
  if (s == "traversals") return CostAwareSearch::traversals;
  CAMPO_FAIL("unknown cost-aware search '", s, "' (expected exact or traversals)");
}

CastCostModel fit_cast_model(const std::vector<std::pair<int64_t, double>>& samples) {
  CAMPO_CHECK(samples.size() >= 2, "the cast model needs at least two measured casts, got ",
              samples.size());
  double n = double(samples.size()), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : samples) {
    sx += double(x);
    sy += y;
    sxx += double(x) * double(x);
    sxy += double(x) * y;
  }
  const double denom = n * sxx - sx * sx;
  CAMPO_CHECK(denom > 0, "the cast model needs casts of at least two different sizes");
  CastCostModel m;
  m.per_element_ms = (n * sxy - sx * sy) / denom;
  m.fixed_ms = (sy - m.per_element_ms * sx) / n;
  return m;
}

bool output_follows_node(const Node& n, int i) {
  return i == 0 || n.kind == OpKind::Dropout || n.kind == OpKind::SplitV;
}

bool cast_folds_into_producer(const Node& producer, int output_index) {
  return output_index == 0 && op_schema(producer.kind).can_write_f32_output;
}

namespace {

bool is_leaf(const Node& n) { return n.kind == OpKind::Variable || n.kind == OpKind::Placeholder; }

bool slot_is_fp32(const Node& n, int slot) { return op_schema(n.kind).input_stays_f32(slot); }

struct CostGraph {
  const Graph& g;
  const CostTable& costs;
  bool fold = false;
  // consumers[v] = (node, slot) pairs reading value v
  std::vector<std::vector<std::pair<NodeId, int>>> consumers;
  // By value: an updated weight, whose f32 -> low cast becomes a weight copy the optimizer
  // update writes (apply_precision) when casts fold. It is priced at 0: the update's extra
  // stores (2 bytes per element, in the same pass) are not modelled.
  std::vector<char> weight_copy;

  CostGraph(const Graph& graph, const CostTable& c, bool fold_casts)
      : g(graph), costs(c), fold(fold_casts), consumers(size_t(graph.num_values())),
        weight_copy(size_t(graph.num_values()), 0) {
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      for (int s = 0; s < int(n.inputs.size()); ++s)
        consumers[size_t(n.inputs[size_t(s)])].push_back({id, s});
      if (fold && n.kind == OpKind::Variable)
        weight_copy[size_t(n.outputs[0])] = optimizer_update_of(g, n.outputs[0]) >= 0;
    }
  }

  double total_ms(const std::vector<char>& low) const {
    double total = 0;
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (is_leaf(n) || n.kind == OpKind::Cast) continue;
      if (size_t(id) < costs.nodes.size())
        total += low[size_t(id)] ? costs.nodes[size_t(id)].low_ms : costs.nodes[size_t(id)].fp32_ms;
    }
    for (ValueId v = 0; v < g.num_values(); ++v) {
      const Value& val = g.value(v);
      if (!is_floating(val.dtype) || consumers[size_t(v)].empty()) continue;
      const Node& producer = g.node(val.producer);
      const bool produced_low = low[size_t(val.producer)] && output_follows_node(producer, val.output_index);
      bool need_low = false, need_f32 = false;
      for (auto [c, slot] : consumers[size_t(v)]) {
        const Node& cn = g.node(c);
        if (cn.kind == OpKind::Cast) continue;
        const bool wants_low = low[size_t(c)] && !slot_is_fp32(cn, slot);
        (wants_low ? need_low : need_f32) = true;
      }
      const int64_t elements = shape_numel(val.shape);
      const bool folded = fold && !need_low && cast_folds_into_producer(producer, val.output_index);
      if (produced_low && need_f32 && !folded) total += costs.cast_ms(false, elements);
      if (!produced_low && need_low && !weight_copy[size_t(v)])
        total += costs.cast_ms(true, elements);
    }
    return total;
  }
};

// The assignment of least predicted step time over the nodes `is_free` marks (the others
// stay f32), by minimum cut. x = 1 means low precision.
// `pinned_low`: nodes fixed low (the others not free stay f32).
std::vector<char> exact_assignment(const CostGraph& cg, const std::vector<char>& is_free,
                                   const std::vector<char>& pinned_low) {
  const Graph& g = cg.g;
  BinaryCut cut;
  std::vector<BinaryCut::Lit> lit(size_t(g.num_nodes()), BinaryCut::zero());
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (pinned_low[size_t(id)]) lit[size_t(id)] = BinaryCut::one();
    if (!is_free[size_t(id)]) continue;
    lit[size_t(id)] = cut.new_var();
    if (size_t(id) < cg.costs.nodes.size())
      cut.add_unary(lit[size_t(id)], cg.costs.nodes[size_t(id)].fp32_ms,
                    cg.costs.nodes[size_t(id)].low_ms);
  }
  const double inf = BinaryCut::infinity();
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(v);
    if (!is_floating(val.dtype) || cg.consumers[size_t(v)].empty()) continue;
    const Node& producer = g.node(val.producer);
    const BinaryCut::Lit made = output_follows_node(producer, val.output_index)
                                    ? lit[size_t(val.producer)] : BinaryCut::zero();
    std::vector<BinaryCut::Lit> wants;  // per consumer: reads v in low precision
    bool some_free = false, some_f32 = false;
    for (auto [c, slot] : cg.consumers[size_t(v)]) {
      if (g.node(c).kind == OpKind::Cast) continue;
      const BinaryCut::Lit w = slot_is_fp32(g.node(c), slot) ? BinaryCut::zero() : lit[size_t(c)];
      (w.var >= 0 ? some_free : some_f32) = true;
      if (w.var >= 0) wants.push_back(w);
    }
    const int64_t elements = shape_numel(val.shape);
    // f32 -> low: paid when the value is made in f32 and some consumer reads it low. The
    // helper y = "a low copy exists" must be 1 for every consumer that reads low.
    if (some_free && !(made.var < 0 && made.value == 1) && !cg.weight_copy[size_t(v)]) {
      const BinaryCut::Lit y = cut.new_var();
      cut.add_if_0_1(made, y, cg.costs.cast_ms(true, elements) + kCastTieBreakMs);
      for (BinaryCut::Lit w : wants) cut.add_if_0_1(y, w, inf);
    }
    // low -> f32: paid when the value is made low and some consumer reads it in f32. The
    // helper a = "all consumers read low" must be 0 when any consumer reads f32.
    const bool folded = cg.fold && !some_free && cast_folds_into_producer(producer, val.output_index);
    if (made.var >= 0 && (some_f32 || some_free) && !folded) {
      if (some_f32) {
        cut.add_unary(made, 0.0, cg.costs.cast_ms(false, elements) + kCastTieBreakMs);
      } else {
        const BinaryCut::Lit all_low = cut.new_var();
        cut.add_if_0_1(all_low, made, cg.costs.cast_ms(false, elements) + kCastTieBreakMs);
        for (BinaryCut::Lit w : wants) cut.add_if_0_1(w, all_low, inf);
      }
    }
  }
  const std::vector<char> labels = cut.minimize();
  std::vector<char> low = pinned_low;
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (lit[size_t(id)].var >= 0) low[size_t(id)] = labels[size_t(lit[size_t(id)].var)];
  return low;
}

}  // namespace

std::vector<char> deny_painted(const Graph& g, const AmpLists& lists) {
  const int n = g.num_nodes();
  std::vector<AmpList> cls(static_cast<size_t>(n));
  for (NodeId i = 0; i < n; ++i) cls[size_t(i)] = lists.classify(g.node(i).kind);
  auto is = [&](NodeId i, AmpList l) { return cls[size_t(i)] == l; };
  std::vector<std::vector<NodeId>> outs(static_cast<size_t>(n)), ins(static_cast<size_t>(n));
  for (NodeId i = 0; i < n; ++i)
    for (ValueId v : g.node(i).inputs) {
      ins[size_t(i)].push_back(g.value(v).producer);
      outs[size_t(g.value(v).producer)].push_back(i);
    }
  std::vector<char> upstream(size_t(n), 0), deny(size_t(n), 0);
  for (NodeId root = 0; root < n; ++root) {
    if (!is(root, AmpList::deny) && !is(root, AmpList::infer)) continue;
    std::vector<NodeId> stack = {root};
    upstream[size_t(root)] = 1;
    while (!stack.empty()) {
      NodeId x = stack.back();
      stack.pop_back();
      for (NodeId p : ins[size_t(x)])
        if (!upstream[size_t(p)] && is(p, AmpList::clear)) {
          upstream[size_t(p)] = 1;
          stack.push_back(p);
        }
    }
  }
  for (NodeId root = 0; root < n; ++root) {
    if (!is(root, AmpList::deny) || deny[size_t(root)]) continue;
    std::vector<NodeId> stack = {root};
    deny[size_t(root)] = 1;
    while (!stack.empty()) {
      NodeId x = stack.back();
      stack.pop_back();
      for (NodeId c : outs[size_t(x)])
        if (!deny[size_t(c)] && upstream[size_t(c)] && !is(c, AmpList::allow)) {
          deny[size_t(c)] = 1;
          stack.push_back(c);
        }
    }
  }
  return deny;
}

std::vector<char> cost_aware_free_nodes(const Graph& g, const AmpLists& lists) {
  const std::vector<char> deny = deny_painted(g, lists);
  std::vector<char> is_free(size_t(g.num_nodes()), 0);
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& node = g.node(i);
    const AmpList l = lists.classify(node.kind);
    is_free[size_t(i)] = !is_leaf(node) && node.kind != OpKind::Cast && !deny[size_t(i)] &&
                         (l == AmpList::allow || l == AmpList::infer || l == AmpList::clear);
  }
  return is_free;
}

double predict_step_ms(const Graph& g, const CostTable& costs, const std::vector<char>& low,
                       bool fold_casts) {
  return CostGraph(g, costs, fold_casts).total_ms(low);
}

CostAwarePlan plan_cost_aware(const Graph& g, const AmpLists& lists, const CostTable& costs,
                              const CostAwareOptions& options) {
  const int n = g.num_nodes();
  CostGraph cg(g, costs, options.fold_casts);
  CostAwarePlan plan;
  plan.low.assign(size_t(n), 0);
  plan.decided_by.assign(size_t(n), Traversal::none);
  std::vector<AmpList> cls(static_cast<size_t>(n));
  for (NodeId i = 0; i < n; ++i) cls[size_t(i)] = lists.classify(g.node(i).kind);
  auto is = [&](NodeId i, AmpList l) { return cls[size_t(i)] == l; };
  const std::vector<NodeId> order = g.topological_order();
  CAMPO_CHECK(options.pins.empty() || options.pins.size() == size_t(n),
              "internal: cost-aware pins cover ", options.pins.size(), " of ", n, " nodes");
  auto pinned = [&](NodeId i) {
    return !options.pins.empty() && options.pins[size_t(i)] != kUnpinned;
  };
  std::vector<char> pinned_low(size_t(n), 0);
  for (NodeId i = 0; i < n; ++i)
    if (pinned(i)) {
      pinned_low[size_t(i)] = options.pins[size_t(i)] == kPinnedLow;
      plan.low[size_t(i)] = pinned_low[size_t(i)];
      plan.decided_by[size_t(i)] = Traversal::rule;
    }

  // Flips `nodes` to low when that lowers (or, if `ties_to_low`, keeps) the step cost.
  auto try_low = [&](const std::vector<NodeId>& nodes, bool ties_to_low, Traversal t) {
    const double before = cg.total_ms(plan.low);
    for (NodeId i : nodes) plan.low[size_t(i)] = 1;
    const double after = cg.total_ms(plan.low);
    if (after < before || (ties_to_low && after <= before)) {
      for (NodeId i : nodes) plan.decided_by[size_t(i)] = t;
      return true;
    }
    for (NodeId i : nodes) plan.low[size_t(i)] = 0;
    return false;
  };

  // 1. allow-list ops.
  for (NodeId i : order)
    if (is(i, AmpList::allow) && !pinned(i)) try_low({i}, false, Traversal::allow);

  // 2. deny, propagated forward through infer ops and clear ops that lead into deny/infer
  //    ops (the same rule as the amp policy).
  std::vector<std::vector<NodeId>> outs(static_cast<size_t>(n)), ins(static_cast<size_t>(n));
  for (NodeId i = 0; i < n; ++i)
    for (ValueId v : g.node(i).inputs) {
      ins[size_t(i)].push_back(g.value(v).producer);
      outs[size_t(g.value(v).producer)].push_back(i);
    }
  const std::vector<char> deny = deny_painted(g, lists);
  for (NodeId i = 0; i < n; ++i)
    if (deny[size_t(i)] && !pinned(i)) plan.decided_by[size_t(i)] = Traversal::deny;

  // 3. infer/clear ops next to a low-precision node (forward, then backward, so that
  //    adoption can spread both ways).
  auto has_low_neighbour = [&](NodeId i) {
    for (NodeId p : ins[size_t(i)])
      if (plan.low[size_t(p)]) return true;
    for (NodeId c : outs[size_t(i)])
      if (plan.low[size_t(c)]) return true;
    return false;
  };
  auto candidate = [&](NodeId i) {
    return !plan.low[size_t(i)] && !deny[size_t(i)] && !pinned(i) &&
           (is(i, AmpList::infer) || is(i, AmpList::clear));
  };
  // First whole regions (infer/clear ops connected through infer/clear ops) next to a low
  // node: a run between two low nodes only pays as a whole when each cast has a fixed cost.
  {
    std::vector<char> in_region(size_t(n), 0);
    for (NodeId start : order) {
      if (in_region[size_t(start)] || !candidate(start)) continue;
      std::vector<NodeId> region, stack = {start};
      in_region[size_t(start)] = 1;
      bool touches_low = false;
      while (!stack.empty()) {
        NodeId x = stack.back();
        stack.pop_back();
        region.push_back(x);
        for (const auto* nbrs : {&ins[size_t(x)], &outs[size_t(x)]})
          for (NodeId y : *nbrs) {
            if (plan.low[size_t(y)]) touches_low = true;
            if (!in_region[size_t(y)] && candidate(y)) {
              in_region[size_t(y)] = 1;
              stack.push_back(y);
            }
          }
      }
      // A region of clear ops only is traversal 4's (a clear chain).
      bool has_infer = false;
      for (NodeId x : region) has_infer |= is(x, AmpList::infer);
      if (touches_low && has_infer) try_low(region, true, Traversal::neighbour);
    }
  }
  // Then single nodes, forward and backward.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < order.size(); ++k) {
      NodeId i = pass == 0 ? order[k] : order[order.size() - 1 - k];
      if (candidate(i) && has_low_neighbour(i)) try_low({i}, true, Traversal::neighbour);
    }
  }

  // 4. chains of clear ops (connected through clear ops) touching a low node.
  std::vector<char> seen(size_t(n), 0);
  for (NodeId start : order) {
    if (seen[size_t(start)] || !candidate(start) || !is(start, AmpList::clear)) continue;
    std::vector<NodeId> chain, stack = {start};
    seen[size_t(start)] = 1;
    bool touches_low = false;
    while (!stack.empty()) {
      NodeId x = stack.back();
      stack.pop_back();
      chain.push_back(x);
      for (const auto* nbrs : {&ins[size_t(x)], &outs[size_t(x)]})
        for (NodeId y : *nbrs) {
          if (plan.low[size_t(y)]) touches_low = true;
          if (!seen[size_t(y)] && candidate(y) && is(y, AmpList::clear)) {
            seen[size_t(y)] = 1;
            stack.push_back(y);
          }
        }
    }
    if (touches_low) try_low(chain, false, Traversal::clear_chain);
  }

  for (NodeId i = 0; i < n; ++i)
    if (!pinned(i) && (is_leaf(g.node(i)) || is(i, AmpList::fp32))) plan.low[size_t(i)] = 0;
  plan.predicted_ms = plan.traversals_ms = cg.total_ms(plan.low);
  if (options.search == CostAwareSearch::traversals) return plan;

  // 5. The exact search over the nodes the traversals could have made low (pinned ones kept).
  std::vector<char> is_free = cost_aware_free_nodes(g, lists);
  for (NodeId i = 0; i < n; ++i)
    if (pinned(i)) is_free[size_t(i)] = 0;
  std::vector<char> best = exact_assignment(cg, is_free, pinned_low);
  const double exact_ms = cg.total_ms(best);
  // The cut is exact (it may give up at most the tie-break per cast for fewer casts); the
  // check guards against rounding in the flow: never take a worse plan.
  if (exact_ms > plan.traversals_ms + kCastTieBreakMs * double(g.num_values()) + 1e-9) return plan;
  for (NodeId i = 0; i < n; ++i)
    if (best[size_t(i)] != plan.low[size_t(i)]) {
      plan.decided_by[size_t(i)] = Traversal::exact;
      ++plan.exact_changes;
    }
  plan.low = std::move(best);
  plan.predicted_ms = exact_ms;
  return plan;
}

}  // namespace campo
