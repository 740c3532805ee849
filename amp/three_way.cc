#include "amp/three_way.h"

#include <cmath>
#include <utility>

#include "amp/min_cut.h"
#include "graph/optimizer.h"
#include "runtime/check.h"

namespace campo {

const char* low_precision_mode_name(LowPrecisionMode m) {
  switch (m) {
    case LowPrecisionMode::fp16:
      return "fp16";
    case LowPrecisionMode::bf16:
      return "bf16";
    case LowPrecisionMode::automatic:
      return "auto";
  }
  return "?";
}

LowPrecisionMode parse_low_precision_mode(const std::string& s) {
  if (s == "fp16" || s == "f16") return LowPrecisionMode::fp16;
  if (s == "bf16") return LowPrecisionMode::bf16;
  if (s == "auto") return LowPrecisionMode::automatic;
  CAMPO_FAIL("--low-precision must be bf16, fp16 or auto, got '", s, "'");
}

DType low_type_of(LowPrecisionMode m) {
  return m == LowPrecisionMode::fp16 ? DType::f16 : DType::bf16;
}

double NodeCost3::ms(DType t) const {
  switch (t) {
    case DType::f32:
      return f32_ms;
    case DType::f16:
      return f16_ms;
    case DType::bf16:
      return bf16_ms;
    default:
      break;
  }
  CAMPO_FAIL("a node runs in f32, f16 or bf16, not ", dtype_name(t));
}

double CastCosts::cost_ms(DType from, DType to, int64_t elements) const {
  if (from == DType::f32 && to == DType::f16) return f32_to_f16.cost_ms(elements);
  if (from == DType::f16 && to == DType::f32) return f16_to_f32.cost_ms(elements);
  if (from == DType::f32 && to == DType::bf16) return f32_to_bf16.cost_ms(elements);
  if (from == DType::bf16 && to == DType::f32) return bf16_to_f32.cost_ms(elements);
  CAMPO_FAIL("casts are priced between f32 and f16 or bf16, not ", dtype_name(from), " -> ",
             dtype_name(to), " (f16 <-> bf16 is priced as two casts through f32)");
}

namespace {

using Lit = BinaryCut::Lit;

bool is_leaf(const Node& n) { return n.kind == OpKind::Variable || n.kind == OpKind::Placeholder; }
bool has_time(const Node& n) { return !is_leaf(n) && n.kind != OpKind::Cast; }
bool slot_is_fp32(const Node& n, int slot) { return op_schema(n.kind).input_stays_f32(slot); }
bool is_constant(Lit x, int value) { return x.var < 0 && x.value == value; }

// Per value: its readers (casts excluded: they are what the plan inserts), and whether its
// f32 -> low casts are weight copies the optimizer update writes (fold_casts only).
struct Reads {
  std::vector<std::vector<std::pair<NodeId, int>>> readers;
  std::vector<char> weight_copy;

  Reads(const Graph& g, bool fold)
      : readers(size_t(g.num_values())), weight_copy(size_t(g.num_values()), 0) {
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (n.kind != OpKind::Cast)
        for (int s = 0; s < int(n.inputs.size()); ++s)
          readers[size_t(n.inputs[size_t(s)])].push_back({id, s});
      if (fold && n.kind == OpKind::Variable)
        weight_copy[size_t(n.outputs[0])] = optimizer_update_of(g, n.outputs[0]) >= 0;
    }
  }
};

NodeCost3 node_cost(const ThreeWayCostTable& costs, NodeId id) {
  return size_t(id) < costs.nodes.size() ? costs.nodes[size_t(id)] : NodeCost3{};
}

// "Pay c when x = 0 and some y = 1" (a copy the readers y need and x lacks), exactly: a helper
// h >= every y, and c when x = 0, h = 1.
void pay_if_0_and_any_1(BinaryCut& cut, Lit x, const std::vector<Lit>& ys, double c) {
  if (is_constant(x, 1)) return;
  bool any_may_be_1 = false;
  for (Lit y : ys) {
    if (is_constant(y, 1)) {
      cut.add_if_0_1(x, BinaryCut::one(), c);
      return;
    }
    any_may_be_1 |= y.var >= 0;
  }
  if (!any_may_be_1) return;
  const Lit h = cut.new_var();
  cut.add_if_0_1(x, h, c);
  for (Lit y : ys)
    if (y.var >= 0) cut.add_if_0_1(h, y, BinaryCut::infinity());
}

// "Pay c when x = 1 and some y = 0", the mirror: a helper h <= every y, and c when h = 0, x = 1.
void pay_if_1_and_any_0(BinaryCut& cut, Lit x, const std::vector<Lit>& ys, double c) {
  if (is_constant(x, 0)) return;
  bool any_may_be_0 = false;
  for (Lit y : ys) {
    if (is_constant(y, 0)) {
      cut.add_if_0_1(BinaryCut::zero(), x, c);
      return;
    }
    any_may_be_0 |= y.var >= 0;
  }
  if (!any_may_be_0) return;
  const Lit h = cut.new_var();
  cut.add_if_0_1(h, x, c);
  for (Lit y : ys)
    if (y.var >= 0) cut.add_if_0_1(y, h, BinaryCut::infinity());
}

}  // namespace

std::vector<uint8_t> allowed_types(const Graph& g, const AmpLists& f16_lists,
                                   const AmpLists& bf16_lists, LowPrecisionMode mode) {
  std::vector<uint8_t> allowed(size_t(g.num_nodes()), kAllowF32);
  if (mode != LowPrecisionMode::bf16) {
    const std::vector<char> free = cost_aware_free_nodes(g, f16_lists);
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (free[size_t(i)] && (mode != LowPrecisionMode::automatic || !needs_range(g.node(i).kind)))
        allowed[size_t(i)] |= kAllowF16;
  }
  if (mode != LowPrecisionMode::fp16) {
    const std::vector<char> free = cost_aware_free_nodes(g, bf16_lists);
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (free[size_t(i)]) allowed[size_t(i)] |= kAllowBF16;
  }
  return allowed;
}

double predict_step_ms(const Graph& g, const ThreeWayCostTable& costs,
                       const std::vector<DType>& dtype, bool fold_casts) {
  CAMPO_CHECK(dtype.size() == size_t(g.num_nodes()), "a three-way plan holds ", dtype.size(),
              " node types for a graph of ", g.num_nodes(), " nodes");
  const Reads reads(g, fold_casts);
  const CastCosts& cast = costs.casts;
  double total = 0.0;
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (has_time(g.node(id)) && size_t(id) < costs.nodes.size())
      total += costs.nodes[size_t(id)].ms(dtype[size_t(id)]);
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(v);
    if (!is_floating(val.dtype) || reads.readers[size_t(v)].empty()) continue;
    const Node& producer = g.node(val.producer);
    const DType made = has_time(producer) && output_follows_node(producer, val.output_index)
                           ? dtype[size_t(val.producer)]
                           : DType::f32;
    bool reads_f32 = false, reads_f16 = false, reads_bf16 = false;
    for (auto [c, slot] : reads.readers[size_t(v)]) {
      const DType t = slot_is_fp32(g.node(c), slot) ? DType::f32 : dtype[size_t(c)];
      (t == DType::f16 ? reads_f16 : t == DType::bf16 ? reads_bf16 : reads_f32) = true;
    }
    const int64_t n = shape_numel(val.shape);
    const bool folded = fold_casts && !reads_f16 && !reads_bf16 &&
                        cast_folds_into_producer(producer, val.output_index);
    const bool copied = reads.weight_copy[size_t(v)];
    if (made == DType::f16 && (reads_f32 || reads_bf16) && !folded)
      total += cast.cost_ms(DType::f16, DType::f32, n);
    if (made == DType::bf16 && (reads_f32 || reads_f16) && !folded)
      total += cast.cost_ms(DType::bf16, DType::f32, n);
    if (made != DType::f16 && reads_f16 && !copied)
      total += cast.cost_ms(DType::f32, DType::f16, n);
    if (made != DType::bf16 && reads_bf16 && !copied)
      total += cast.cost_ms(DType::f32, DType::bf16, n);
  }
  return total;
}

ThreeWayPlan minimize_three_way(const Graph& g, const ThreeWayCostTable& costs,
                                const std::vector<uint8_t>& allowed, bool fold_casts) {
  const int n = g.num_nodes();
  CAMPO_CHECK(allowed.size() == size_t(n), "the three-way search got the allowed types of ",
              allowed.size(), " nodes for a graph of ", n);
  const double inf = BinaryCut::infinity();
  BinaryCut cut;
  // Per node: u = [not f16], w = [bf16] (f16 = 00, f32 = 10, bf16 = 11); constants where a
  // node has one type, or lacks f16 (u = 1) or bf16 (w = 0).
  std::vector<Lit> u(size_t(n), BinaryCut::one()), w(size_t(n), BinaryCut::zero());
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (!has_time(node)) continue;
    const NodeCost3 c = node_cost(costs, id);
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      CAMPO_CHECK(c.ms(t) >= 0, "node ", node.name, " (", op_name(node.kind), "): its ",
                  dtype_name(t), " time must be >= 0 ms or kNoKernel, got ", c.ms(t));
    const uint8_t a = allowed[size_t(id)];
    const bool f32 = (a & kAllowF32) && !std::isinf(c.f32_ms);
    const bool f16 = (a & kAllowF16) && !std::isinf(c.f16_ms);
    const bool bf16 = (a & kAllowBF16) && !std::isinf(c.bf16_ms);
    CAMPO_CHECK(f32 || f16 || bf16, "node ", node.name, " (", op_name(node.kind),
                ") has no precision to run in: none of the types allowed to it (",
                (a & kAllowF32) ? "f32 " : "", (a & kAllowF16) ? "f16 " : "",
                (a & kAllowBF16) ? "bf16 " : "", ") has a kernel time");
    if (f16) u[size_t(id)] = f32 || bf16 ? cut.new_var() : BinaryCut::zero();
    if (bf16) w[size_t(id)] = f32 || f16 ? cut.new_var() : BinaryCut::one();
    if (u[size_t(id)].var >= 0 && w[size_t(id)].var >= 0)
      cut.add_if_0_1(u[size_t(id)], w[size_t(id)], inf);  // w <= u: no "bf16 and f16"
    // [u = 0] t_f16 + [u = 1, w = 0] t_f32 + [w = 1] t_bf16; a missing type is never chosen
    // (its constant or its infinite term rules it out).
    cut.add_unary(u[size_t(id)], f16 ? c.f16_ms : 0.0, 0.0);
    cut.add_if_0_1(w[size_t(id)], u[size_t(id)], f32 ? c.f32_ms : inf);
    cut.add_unary(w[size_t(id)], 0.0, bf16 ? c.bf16_ms : 0.0);
  }
  const Reads reads(g, fold_casts);
  const CastCosts& cast = costs.casts;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(v);
    if (!is_floating(val.dtype) || reads.readers[size_t(v)].empty()) continue;
    const Node& producer = g.node(val.producer);
    const bool follows = has_time(producer) && output_follows_node(producer, val.output_index);
    const Lit made_u = follows ? u[size_t(val.producer)] : BinaryCut::one();
    const Lit made_w = follows ? w[size_t(val.producer)] : BinaryCut::zero();
    std::vector<Lit> read_u, read_w;
    bool all_read_f32 = true;  // whatever the plan
    for (auto [c, slot] : reads.readers[size_t(v)]) {
      const bool f32_slot = slot_is_fp32(g.node(c), slot);
      read_u.push_back(f32_slot ? BinaryCut::one() : u[size_t(c)]);
      read_w.push_back(f32_slot ? BinaryCut::zero() : w[size_t(c)]);
      all_read_f32 &= is_constant(read_u.back(), 1) && is_constant(read_w.back(), 0);
    }
    const int64_t elements = shape_numel(val.shape);
    const bool folded =
        fold_casts && all_read_f32 && cast_folds_into_producer(producer, val.output_index);
    const bool copied = reads.weight_copy[size_t(v)];
    auto priced = [&](DType from, DType to) {
      return cast.cost_ms(from, to, elements) + kCastTieBreakMs;
    };
    // Layer u: f16 -> f32 (made f16, some reader not f16), f32 -> f16 (the mirror).
    if (!folded) pay_if_0_and_any_1(cut, made_u, read_u, priced(DType::f16, DType::f32));
    if (!copied) pay_if_1_and_any_0(cut, made_u, read_u, priced(DType::f32, DType::f16));
    // Layer w: f32 -> bf16 (made not bf16, some reader bf16), bf16 -> f32 (the mirror).
    if (!copied) pay_if_0_and_any_1(cut, made_w, read_w, priced(DType::f32, DType::bf16));
    if (!folded) pay_if_1_and_any_0(cut, made_w, read_w, priced(DType::bf16, DType::f32));
  }
  const std::vector<char> labels = cut.minimize();
  auto value_of = [&](Lit x) { return x.var >= 0 ? int(labels[size_t(x.var)]) : x.value; };
  ThreeWayPlan plan;
  plan.dtype.assign(size_t(n), DType::f32);
  for (NodeId id = 0; id < n; ++id) {
    if (!has_time(g.node(id))) continue;
    DType& t = plan.dtype[size_t(id)];
    t = value_of(u[size_t(id)]) == 0   ? DType::f16
        : value_of(w[size_t(id)]) == 1 ? DType::bf16
                                       : DType::f32;
    plan.f16_nodes += t == DType::f16;
    plan.bf16_nodes += t == DType::bf16;
  }
  plan.needs_loss_scaling = plan.f16_nodes > 0;
  plan.predicted_ms = predict_step_ms(g, costs, plan.dtype, fold_casts);
  return plan;
}

ThreeWayPlan plan_three_way(const Graph& g, const AmpLists& f16_lists, const AmpLists& bf16_lists,
                            const ThreeWayCostTable& costs, const ThreeWayOptions& options) {
  return minimize_three_way(g, costs, allowed_types(g, f16_lists, bf16_lists, options.mode),
                            options.fold_casts);
}

}  // namespace campo
