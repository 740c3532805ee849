#include "graph/optimizer.h"

#include <map>

#include "runtime/check.h"

namespace campo {

OptimizerConfig::Kind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerConfig::Kind::sgd;
  CAMPO_CHECK(name == "adam", "unknown optimizer '", name, "' (expected sgd or adam)");
  return OptimizerConfig::Kind::adam;
}

const char* optimizer_name(OptimizerConfig::Kind kind) {
  return kind == OptimizerConfig::Kind::adam ? "adam" : "sgd";
}

void append_optimizer(Builder& b, const std::vector<std::string>& params,
                      const std::vector<ValueId>& grads, const OptimizerConfig& config,
                      ValueId all_finite) {
  CAMPO_CHECK(params.size() == grads.size(), "internal: ", params.size(), " parameters and ",
              grads.size(), " gradients");
  const bool sgd = config.kind == OptimizerConfig::Kind::sgd;
  CAMPO_CHECK(config.slices >= 1, "optimizer: slices must be >= 1, got ", config.slices);
  CAMPO_CHECK(config.slice_momentum.empty() || int(config.slice_momentum.size()) == config.slices,
              "optimizer: slice_momentum has ", config.slice_momentum.size(), " values for ",
              config.slices, " slices (give one per slice, or none)");
  CAMPO_CHECK(
      config.slice_weight_decay.empty() || int(config.slice_weight_decay.size()) == config.slices,
      "optimizer: slice_weight_decay has ", config.slice_weight_decay.size(), " values for ",
      config.slices, " slices (give one per slice, or none)");
  CAMPO_CHECK(sgd || config.slice_momentum.empty(),
              "optimizer: slice_momentum applies to sgd only (adam has no momentum)");
  Graph& g = b.graph();
  const Phase saved = b.phase();
  b.set_phase(Phase::update);
  const Shape lr_shape = config.slices > 1 ? Shape{config.slices} : Shape{};
  ValueId lr = g.find_node("lr") >= 0 ? g.node(g.find_node("lr")).outputs[0]
                                      : b.placeholder("lr", lr_shape, DType::f32);
  CAMPO_CHECK(g.value(lr).shape == lr_shape, "optimizer: the graph's \"lr\" has shape ",
              shape_str(g.value(lr).shape), " but ", config.slices, " slices need ",
              shape_str(lr_shape));
  ValueId step = kNoValue;
  if (config.kind == OptimizerConfig::Kind::adam)
    step = g.find_node("step") >= 0 ? g.node(g.find_node("step")).outputs[0]
                                    : b.placeholder("step", {}, DType::f32);
  // Per parameter its role inputs (ApplyMomentum: var, accum, grad; ApplyAdam: var, m, v,
  // grad), in parameter order.
  std::vector<std::vector<ValueId>> roles;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i];
    CAMPO_CHECK(grads[i] != kNoValue, "parameter '", name, "' does not influence the loss");
    NodeId var_node = g.find_node(name);
    CAMPO_CHECK(var_node >= 0 && g.node(var_node).kind == OpKind::Variable, "no variable '", name,
                "' in the graph");
    ValueId var = g.node(var_node).outputs[0];
    const Shape shape = g.value(var).shape;
    CAMPO_CHECK(shape_numel(shape) % config.slices == 0, "parameter '", name, "' of shape ",
                shape_str(shape), " cannot be cut into ", config.slices,
                " equal slices (one per model of the array)");
    if (sgd) {
      ValueId accum = b.variable_exact(name + ".momentum_buffer", shape, Init::zeros(),
                                       VariableKind::optimizer_state);
      roles.push_back({var, accum, grads[i]});
    } else {
      ValueId m = b.variable_exact(name + ".exp_avg", shape, Init::zeros(),
                                   VariableKind::optimizer_state);
      ValueId v = b.variable_exact(name + ".exp_avg_sq", shape, Init::zeros(),
                                   VariableKind::optimizer_state);
      roles.push_back({var, m, v, grads[i]});
    }
  }
  const OpKind kind = sgd ? OpKind::ApplyMomentum : OpKind::ApplyAdam;
  std::vector<ValueId> shared = {lr};
  if (!sgd) shared.push_back(step);
  if (all_finite != kNoValue) shared.push_back(all_finite);
  // Updates of params [first, first + count) as one node.
  auto add_update = [&](size_t first, size_t count, const std::string& name) {
    std::vector<ValueId> in;
    for (size_t role = 0; role < roles[first].size(); ++role)
      for (size_t i = first; i < first + count; ++i) in.push_back(roles[i][role]);
    in.insert(in.end(), shared.begin(), shared.end());
    const int tensors = int(count);
    if (sgd)
      b.op(kind, in,
           MomentumAttrs{config.momentum, config.weight_decay, config.nesterov,
                         all_finite != kNoValue, config.slice_momentum, config.slice_weight_decay,
                         tensors, config.stochastic_rounding},
           name);
    else
      b.op(kind, in,
           AdamAttrs{config.beta1, config.beta2, config.epsilon, config.weight_decay,
                     all_finite != kNoValue, config.slice_weight_decay, tensors,
                     config.stochastic_rounding},
           name);
  };
  if (config.multi_tensor && params.size() > 1)
    add_update(0, params.size(), std::string("optimizer/") + op_name(kind));
  else
    for (size_t i = 0; i < params.size(); ++i) add_update(i, 1, params[i] + "/" + op_name(kind));
  b.set_phase(saved);
}

namespace {

bool is_update(OpKind k) { return k == OpKind::ApplyMomentum || k == OpKind::ApplyAdam; }

// Which variable of update `u` is `var`, or -1.
int variable_index(const Graph& g, NodeId u, ValueId var) {
  const Node& n = g.node(u);
  const UpdateLayout l = update_layout(n.kind, n.attrs);
  for (int t = 0; t < l.tensors; ++t)
    if (n.inputs[size_t(l.input(0, t))] == var) return t;
  return -1;
}

// The attrs of update `n` for `tensors` variables.
Attrs with_tensors(const Node& n, int tensors) {
  Attrs a = n.attrs;
  if (n.kind == OpKind::ApplyMomentum)
    std::get<MomentumAttrs>(a).tensors = tensors;
  else
    std::get<AdamAttrs>(a).tensors = tensors;
  return a;
}

// The inputs of update `n` (layout l, no copies) for its variables `keep`, in that order,
// followed by `copies` (one per kept variable, or none).
std::vector<ValueId> update_inputs(const Node& n, const UpdateLayout& l,
                                   const std::vector<int>& keep,
                                   const std::vector<ValueId>& copies) {
  std::vector<ValueId> in;
  for (int role = 0; role < l.roles; ++role)
    for (int t : keep) in.push_back(n.inputs[size_t(l.input(role, t))]);
  in.insert(in.end(), n.inputs.begin() + l.lr(), n.inputs.begin() + l.required());
  in.insert(in.end(), copies.begin(), copies.end());
  return in;
}

}  // namespace

namespace {

// Sets variable node `name` of g (if g has it) to `dtype`; whether it changed.
bool retype_variable(Graph& g, const std::string& name, DType dtype) {
  const NodeId id = g.find_node(name);
  if (id < 0 || g.node(id).kind != OpKind::Variable) return false;
  auto& attrs = std::get<VariableAttrs>(g.node(id).attrs);
  if (attrs.dtype == dtype) return false;
  attrs.dtype = dtype;
  g.reinfer(id);
  return true;
}

}  // namespace

bool use_storage_types(Graph& g, VariableStore& vars, const std::vector<std::string>& params,
                       const OptimizerConfig& config) {
  for (const std::string& name : params) vars.set_dtype(name, config.weight_dtype);
  for (const std::string& name : vars.names_of_kind(VariableKind::optimizer_state))
    vars.set_dtype(name, config.state_dtype);
  return retype_variables_as_stored(g, vars);
}

bool retype_variables_as_stored(Graph& g, const VariableStore& vars) {
  bool changed = false;
  for (NodeId id : g.nodes_of_kind(OpKind::Variable)) {
    const std::string& name = g.node(id).name;
    if (vars.contains(name)) changed |= retype_variable(g, name, vars.at(name).dtype());
  }
  return changed;
}

NodeId optimizer_update_of(const Graph& g, ValueId var) {
  if (g.node(g.value(var).producer).kind != OpKind::Variable) return -1;
  for (NodeId c : g.consumers(var))
    if (is_update(g.node(c).kind) && variable_index(g, c, var) >= 0) return c;
  return -1;
}

ValueId update_gradient_of(const Graph& g, ValueId var) {
  const NodeId u = optimizer_update_of(g, var);
  if (u < 0) return kNoValue;
  const Node& n = g.node(u);
  return n.inputs[size_t(update_layout(n.kind, n.attrs).grad(variable_index(g, u, var)))];
}

void add_weight_copies(Graph& g, const std::vector<std::pair<ValueId, ValueId>>& var_copies) {
  // Per update node, its variables' copies (kNoValue: none), in variable order.
  std::map<NodeId, std::vector<ValueId>> copies_of;
  for (const auto& [var, copy] : var_copies) {
    const NodeId u = optimizer_update_of(g, var);
    CAMPO_CHECK(u >= 0, "internal: add_weight_copies: no update writes '",
                g.node(g.value(var).producer).name, "'");
    const Node& n = g.node(u);
    const UpdateLayout l = update_layout(n.kind, n.attrs);
    CAMPO_CHECK(int(n.inputs.size()) == l.required(), "internal: add_weight_copies: '", n.name,
                "' already has weight copies");
    auto& copies = copies_of.try_emplace(u, size_t(l.tensors), kNoValue).first->second;
    copies[size_t(variable_index(g, u, var))] = copy;
  }
  for (const auto& [u, copies] : copies_of) {
    const Node n = g.node(u);
    const UpdateLayout l = update_layout(n.kind, n.attrs);
    std::vector<int> with, without;
    std::vector<ValueId> present;
    for (int t = 0; t < l.tensors; ++t) {
      (copies[size_t(t)] == kNoValue ? without : with).push_back(t);
      if (copies[size_t(t)] != kNoValue) present.push_back(copies[size_t(t)]);
    }
    if (without.empty()) {
      for (ValueId c : present) g.node(u).inputs.push_back(c);
      g.reinfer(u);
      continue;
    }
    g.node(u).inputs = update_inputs(n, l, without, {});
    g.node(u).attrs = with_tensors(n, int(without.size()));
    g.reinfer(u);
    g.add_node(n.kind, update_inputs(n, l, with, present), with_tensors(n, int(with.size())),
               n.name + "/weight_copies", n.dtype, n.phase);
  }
}

}  // namespace campo
