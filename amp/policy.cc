#include "amp/policy.h"

#include <algorithm>
#include <functional>
#include <map>

#include "graph/optimizer.h"

namespace campo {

Precision parse_precision(const std::string& s) {
  if (s == "fp32" || s == "f32") return Precision::fp32;
  if (s == "amp") return Precision::amp;
  if (s == "cost-aware" || s == "cost_aware" || s == "campo") return Precision::cost_aware;
  CAMPO_FAIL("unknown precision policy '", s, "' (expected fp32, amp or cost-aware)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::amp: return "amp";
    case Precision::cost_aware: return "cost-aware";
  }
  return "?";
}

DType default_low_precision(Device device) {
  return device == Device::cuda ? DType::f16 : DType::bf16;
}

namespace {

struct Adjacency {
  std::vector<std::vector<NodeId>> inputs, outputs;  // producer / consumer nodes
  explicit Adjacency(const Graph& g)
      : inputs(size_t(g.num_nodes())), outputs(size_t(g.num_nodes())) {
    for (NodeId id = 0; id < g.num_nodes(); ++id)
      for (ValueId v : g.node(id).inputs) {
        NodeId p = g.value(v).producer;
        inputs[size_t(id)].push_back(p);
        outputs[size_t(p)].push_back(id);
      }
  }
};

enum class Direction { inputs, outputs, both };

// Depth-first traversal from `root`; `enter(idx)` decides whether to visit a neighbour
// (the root is always visited); `visit(idx)` runs in pre-order.
void dfs(const Adjacency& adj, NodeId root, Direction dir, const std::function<bool(NodeId)>& enter,
         const std::function<void(NodeId)>& visit) {
  std::vector<char> seen(adj.inputs.size(), 0);
  std::vector<NodeId> stack = {root};
  seen[size_t(root)] = 1;
  while (!stack.empty()) {
    NodeId id = stack.back();
    stack.pop_back();
    visit(id);
    auto push = [&](const std::vector<NodeId>& next) {
      for (NodeId n : next)
        if (!seen[size_t(n)] && enter(n)) {
          seen[size_t(n)] = 1;
          stack.push_back(n);
        }
    };
    if (dir != Direction::outputs) push(adj.inputs[size_t(id)]);
    if (dir != Direction::inputs) push(adj.outputs[size_t(id)]);
  }
}

bool has_kernel_node(const Node& n) {
  return n.kind != OpKind::Variable && n.kind != OpKind::Placeholder;
}

}  // namespace

std::vector<char> paint_amp(const Graph& g, const AmpLists& lists) {
  const int n = g.num_nodes();
  Adjacency adj(g);
  std::vector<AmpList> cls(static_cast<size_t>(n));
  for (NodeId i = 0; i < n; ++i) cls[size_t(i)] = lists.classify(g.node(i).kind);
  auto is = [&](NodeId i, AmpList l) { return cls[size_t(i)] == l; };

  // 1. allow-list ops.
  std::vector<char> allow(size_t(n), 0), deny(size_t(n), 0);
  for (NodeId i = 0; i < n; ++i) allow[size_t(i)] = is(i, AmpList::allow);

  // 2. deny forward through infer ops and clear ops upstream of deny/infer ops.
  std::vector<char> upstream_of_deny_or_infer(size_t(n), 0);
  for (NodeId root = 0; root < n; ++root) {
    if (!is(root, AmpList::deny) && !is(root, AmpList::infer)) continue;
    dfs(adj, root, Direction::inputs,
        [&](NodeId i) { return !upstream_of_deny_or_infer[size_t(i)] && is(i, AmpList::clear); },
        [&](NodeId i) { upstream_of_deny_or_infer[size_t(i)] = 1; });
  }
  for (NodeId root = 0; root < n; ++root) {
    if (deny[size_t(root)] || !is(root, AmpList::deny)) continue;
    dfs(adj, root, Direction::outputs,
        [&](NodeId i) { return !deny[size_t(i)] && upstream_of_deny_or_infer[size_t(i)]; },
        [&](NodeId i) { deny[size_t(i)] = 1; });
  }

  // 3. clear/infer ops between allow ops.
  std::vector<char> downstream_of_allow(size_t(n), 0), upstream_of_allow(size_t(n), 0);
  for (NodeId root = 0; root < n; ++root) {
    if (!allow[size_t(root)]) continue;
    dfs(adj, root, Direction::outputs,
        [&](NodeId i) {
          return !downstream_of_allow[size_t(i)] && !allow[size_t(i)] && !deny[size_t(i)] &&
                 (is(i, AmpList::clear) || is(i, AmpList::infer));
        },
        [&](NodeId i) { downstream_of_allow[size_t(i)] = 1; });
  }
  std::vector<char> allow_roots = allow;
  for (NodeId root = 0; root < n; ++root) {
    if (!allow_roots[size_t(root)]) continue;
    dfs(adj, root, Direction::inputs,
        [&](NodeId i) { return !upstream_of_allow[size_t(i)] && downstream_of_allow[size_t(i)]; },
        [&](NodeId i) {
          upstream_of_allow[size_t(i)] = 1;
          allow[size_t(i)] = 1;
        });
  }

  // 4. allow through connected clear ops.
  std::vector<char> clear_propagated(size_t(n), 0);
  allow_roots = allow;
  for (NodeId root = 0; root < n; ++root) {
    if (!allow_roots[size_t(root)] || clear_propagated[size_t(root)]) continue;
    dfs(adj, root, Direction::both,
        [&](NodeId i) {
          return !allow[size_t(i)] && !deny[size_t(i)] && is(i, AmpList::clear) &&
                 !clear_propagated[size_t(i)];
        },
        [&](NodeId i) {
          clear_propagated[size_t(i)] = 1;
          allow[size_t(i)] = 1;
        });
  }
  for (NodeId i = 0; i < n; ++i)
    if (!has_kernel_node(g.node(i)) || is(i, AmpList::fp32)) allow[size_t(i)] = 0;
  return allow;
}

namespace {

// Whether every consumer of `v` reads it in f32 (and there is one).
bool f32_consumers_only(const Graph& g, ValueId v) {
  bool any = false;
  for (NodeId c : g.consumers(v)) {
    const Node& n = g.node(c);
    for (int slot = 0; slot < int(n.inputs.size()); ++slot) {
      if (n.inputs[size_t(slot)] != v) continue;
      const bool reads_f32 = n.kind == OpKind::Cast ? attrs_as<CastAttrs>(n.attrs).to == DType::f32
                             : !is_low_precision(n.dtype) ||
                                   op_schema(n.kind).input_stays_f32(slot);
      if (!reads_f32) return false;
      any = true;
    }
  }
  return any;
}

// Whether input `slot` of n is one an optimizer update rewrites in place (a variable: var
// or its state, stored in f32 or bf16; or a weight copy): read as stored, never cast.
bool updated_in_place(const Node& n, int slot) {
  if (n.kind != OpKind::ApplyMomentum && n.kind != OpKind::ApplyAdam) return false;
  const UpdateLayout l = update_layout(n.kind, n.attrs);
  if (slot >= l.required()) return true;  // the weight copies
  return slot < l.lr() && slot / l.tensors != l.roles - 1;
}

}  // namespace

CastStats insert_casts(Graph& g) {
  CastStats stats;
  std::map<std::pair<ValueId, DType>, ValueId> cache;
  const std::vector<NodeId> order = g.topological_order();
  for (NodeId id : order) {
    if (g.node(id).kind == OpKind::Cast) {
      g.reinfer(id);
      continue;
    }
    const OpSchema& schema = op_schema(g.node(id).kind);
    const int num_inputs = int(g.node(id).inputs.size());
    for (int slot = 0; slot < num_inputs; ++slot) {
      const ValueId v = g.node(id).inputs[size_t(slot)];
      const DType have = g.value(v).dtype;
      if (!is_floating(have) || updated_in_place(g.node(id), slot)) continue;
      const DType want = schema.input_stays_f32(slot) ? DType::f32 : g.node(id).dtype;
      if (!is_floating(want) || have == want) continue;
      // One Cast per (value, type), shared by every reader; low -> other low through the
      // value's f32 copy (amp/three_way.h prices it so).
      auto cast_of = [&](DType to, const auto& self) -> ValueId {
        auto it = cache.find({v, to});
        if (it != cache.end()) return it->second;
        const bool via_f32 = is_low_precision(have) && is_low_precision(to);
        const ValueId from = via_f32 ? self(DType::f32, self) : v;
        const Node& producer = g.node(g.value(from).producer);
        std::string name = producer.name + "/Cast_" + dtype_name(to);
        if (producer.outputs.size() > 1) name += "_" + std::to_string(g.value(from).output_index);
        const NodeId cast = g.add_node(OpKind::Cast, {from}, CastAttrs{to}, name,
                                       g.value(from).dtype, g.node(id).phase);
        ++stats.casts;
        stats.cast_elements += shape_numel(g.value(v).shape);
        return cache.emplace(std::make_pair(v, to), g.node(cast).outputs[0]).first->second;
      };
      g.set_input(id, slot, cast_of(want, cast_of));
    }
    if (num_inputs > 0 && g.node(id).kind != OpKind::Variable) g.reinfer(id);
  }
  return stats;
}

CastStats fold_weight_casts(Graph& g) {
  CastStats stats;
  // One copy per variable (under --low-precision auto a weight may be read in f16 and bf16: the
  // second type keeps its Cast).
  std::vector<char> has_copy(size_t(g.num_values()), 0);
  for (NodeId c : g.nodes_of_kind(OpKind::Cast))
    if (g.node(c).weight_copy) has_copy[size_t(g.node(c).inputs[0])] = 1;
  std::vector<std::pair<ValueId, ValueId>> var_copies;
  for (NodeId c : g.nodes_of_kind(OpKind::Cast)) {
    Node& cast = g.node(c);
    const ValueId var = cast.inputs[0];
    if (cast.weight_copy || !is_low_precision(attrs_as<CastAttrs>(cast.attrs).to)) continue;
    if (optimizer_update_of(g, var) < 0 || has_copy[size_t(var)]) continue;
    has_copy[size_t(var)] = 1;
    cast.weight_copy = true;
    var_copies.emplace_back(var, cast.outputs[0]);
    ++stats.weight_copies;
    stats.cast_elements += shape_numel(g.value(var).shape);
  }
  add_weight_copies(g, var_copies);
  return stats;
}

CastStats apply_precision(Graph& g, const std::vector<char>& low, DType low_type,
                          bool fold_casts) {
  CAMPO_CHECK(is_low_precision(low_type), "low precision type must be f16 or bf16, got ",
              dtype_name(low_type));
  CAMPO_CHECK(int(low.size()) == g.num_nodes(), "internal: precision plan covers ", low.size(),
              " of ", g.num_nodes(), " nodes");
  std::vector<DType> dtype(low.size(), DType::f32);
  for (size_t i = 0; i < low.size(); ++i)
    if (low[i]) dtype[i] = low_type;
  return apply_precision(g, dtype, fold_casts);
}

CastStats apply_precision(Graph& g, const std::vector<DType>& dtype, bool fold_casts) {
  CAMPO_CHECK(int(dtype.size()) == g.num_nodes(), "internal: precision plan covers ",
              dtype.size(), " of ", g.num_nodes(), " nodes");
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const DType t = dtype[size_t(i)];
    CAMPO_CHECK(t == DType::f32 || is_low_precision(t), "internal: a precision plan puts ",
                g.node(i).name, " in ", dtype_name(t));
    if (is_low_precision(t)) g.node(i).dtype = t;
  }
  int folded = 0;
  if (fold_casts) {
    for (NodeId i = 0; i < g.num_nodes(); ++i) {
      Node& n = g.node(i);
      if (!is_low_precision(n.dtype) || !op_schema(n.kind).can_write_f32_output ||
          !f32_consumers_only(g, n.outputs[0]))
        continue;
      n.f32_output = true;  // insert_casts re-infers the output type, after the inputs' casts
      ++folded;
    }
  }
  CastStats stats = insert_casts(g);
  stats.folded = folded;
  if (fold_casts) {
    const CastStats copies = fold_weight_casts(g);
    stats.casts -= copies.weight_copies;
    stats.cast_elements -= copies.cast_elements;
    stats.folded += copies.weight_copies;
    stats.weight_copies = copies.weight_copies;
  }
  return stats;
}

PrecisionSummary summarize_precision(const Graph& g, const std::vector<ValueId>& fetches) {
  PrecisionSummary s;
  const std::vector<char> live = fetches.empty() ? std::vector<char>() : live_nodes(g, fetches);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (!has_kernel_node(n) || (!live.empty() && !live[size_t(id)])) continue;
    if (n.kind == OpKind::Cast && n.weight_copy) {
      ++s.casts.folded;
      ++s.casts.weight_copies;
      continue;
    }
    if (n.kind == OpKind::Cast) {
      ++s.casts.casts;
      s.casts.cast_elements += shape_numel(g.value(n.inputs[0]).shape);
      continue;
    }
    if (n.f32_output) ++s.casts.folded;
    if (is_low_precision(n.dtype)) {
      ++s.low_nodes;
      s.f16_nodes += n.dtype == DType::f16;
    } else
      ++s.f32_nodes;
  }
  return s;
}

PrecisionSummary apply_amp_policy(Graph& g, const AmpLists& lists, DType low_type) {
  apply_precision(g, paint_amp(g, lists), low_type);
  return summarize_precision(g);
}

}  // namespace campo
