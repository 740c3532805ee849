#include "graph/optimizer.h"

namespace campo {

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
      std::vector<ValueId> in = {var, accum, grads[i], lr};
      if (all_finite != kNoValue) in.push_back(all_finite);
      b.op(OpKind::ApplyMomentum, in,
           MomentumAttrs{config.momentum, config.weight_decay, config.nesterov,
                         all_finite != kNoValue, config.slice_momentum, config.slice_weight_decay},
           name + "/ApplyMomentum");
    } else {
      ValueId m = b.variable_exact(name + ".exp_avg", shape, Init::zeros(),
                                   VariableKind::optimizer_state);
      ValueId v = b.variable_exact(name + ".exp_avg_sq", shape, Init::zeros(),
                                   VariableKind::optimizer_state);
      std::vector<ValueId> in = {var, m, v, grads[i], lr, step};
      if (all_finite != kNoValue) in.push_back(all_finite);
      b.op(OpKind::ApplyAdam, in,
           AdamAttrs{config.beta1, config.beta2, config.epsilon, config.weight_decay,
                     all_finite != kNoValue, config.slice_weight_decay},
           name + "/ApplyAdam");
    }
  }
  b.set_phase(saved);
}

NodeId optimizer_update_of(const Graph& g, ValueId var) {
  if (g.node(g.value(var).producer).kind != OpKind::Variable) return -1;
  for (NodeId c : g.consumers(var)) {
    const Node& n = g.node(c);
    if ((n.kind == OpKind::ApplyMomentum || n.kind == OpKind::ApplyAdam) && n.inputs[0] == var)
      return c;
  }
  return -1;
}

}  // namespace campo
