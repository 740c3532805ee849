#include "graph/autodiff.h"

#include <map>
#include <set>
#include <string>
#include <unordered_map>

namespace campo {

namespace {

// The names of backward nodes (gradient_sources reads them back): the scope of a node's
// gradient, and the AddN of a value's gradient contributions.
constexpr const char* kGradientScope = "_grad";
constexpr const char* kGradientSum = "/grad_sum";

}  // namespace

std::vector<ValueId> append_gradients(Builder& b, ValueId loss, ValueId seed,
                                      const std::vector<ValueId>& wrt) {
  Graph& g = b.graph();
  CAMPO_CHECK(g.value(seed).shape == g.value(loss).shape, "gradient seed shape ",
              shape_str(g.value(seed).shape), " does not match loss shape ",
              shape_str(g.value(loss).shape));
  const int forward_nodes = g.num_nodes();

  // Values that depend on some wrt value (forward reachability).
  std::vector<char> depends(size_t(g.num_values()), 0);
  for (ValueId v : wrt) depends[size_t(v)] = 1;
  for (NodeId id = 0; id < forward_nodes; ++id) {
    const Node& n = g.node(id);
    bool any = false;
    for (ValueId v : n.inputs) any |= depends[size_t(v)] != 0;
    if (any)
      for (ValueId v : n.outputs) depends[size_t(v)] = 1;
  }
  // Nodes whose outputs reach the loss (backward reachability).
  std::vector<char> reaches(size_t(forward_nodes), 0);
  reaches[size_t(g.value(loss).producer)] = 1;
  for (NodeId id = forward_nodes - 1; id >= 0; --id) {
    if (!reaches[size_t(id)]) continue;
    for (ValueId v : g.node(id).inputs) reaches[size_t(g.value(v).producer)] = 1;
  }

  std::map<ValueId, std::vector<ValueId>> contributions;
  contributions[loss].push_back(seed);
  const Phase saved_phase = b.phase();
  b.set_phase(Phase::backward);

  auto total = [&](ValueId v) -> ValueId {
    auto it = contributions.find(v);
    if (it == contributions.end() || it->second.empty()) return kNoValue;
    if (it->second.size() > 1) {
      ValueId sum = b.op(OpKind::AddN, it->second, NoAttrs{},
                         g.node(g.value(v).producer).name + kGradientSum);
      it->second = {sum};
    }
    return it->second[0];
  };

  for (NodeId id = forward_nodes - 1; id >= 0; --id) {
    if (!reaches[size_t(id)]) continue;
    const Node node = g.node(id);  // a copy: adding nodes may move the node vector
    bool any_input_depends = false;
    for (ValueId v : node.inputs) any_input_depends |= depends[size_t(v)] != 0;
    if (!any_input_depends) continue;
    std::vector<ValueId> output_grads;
    bool any_grad = false;
    for (ValueId v : node.outputs) {
      output_grads.push_back(total(v));
      any_grad |= output_grads.back() != kNoValue;
    }
    if (!any_grad) continue;
    const OpSchema& schema = op_schema(node.kind);
    CAMPO_CHECK(schema.gradient != nullptr, "op ", op_name(node.kind), " ('", node.name,
                "') lies between the parameters and the loss but has no gradient");
    std::vector<ValueId> input_grads;
    {
      auto scope = b.scope(node.name + kGradientScope);
      input_grads = schema.gradient(b, node, output_grads);
    }
    CAMPO_CHECK(input_grads.size() == node.inputs.size(), "internal: gradient of ",
                op_name(node.kind), " returned ", input_grads.size(), " values for ",
                node.inputs.size(), " inputs");
    for (size_t i = 0; i < input_grads.size(); ++i) {
      ValueId in = node.inputs[i];
      if (input_grads[i] == kNoValue || !depends[size_t(in)]) continue;
      CAMPO_CHECK(g.value(input_grads[i]).shape == g.value(in).shape, "internal: gradient of ",
                  op_name(node.kind), " input ", i, " has shape ",
                  shape_str(g.value(input_grads[i]).shape), ", input has ",
                  shape_str(g.value(in).shape));
      contributions[in].push_back(input_grads[i]);
    }
  }

  std::vector<ValueId> result;
  for (ValueId v : wrt) result.push_back(total(v));
  b.set_phase(saved_phase);
  return result;
}

std::vector<NodeId> gradient_sources(const Graph& g) {
  std::unordered_map<std::string, NodeId> forward;
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (g.node(id).phase == Phase::forward) forward.emplace(g.node(id).name, id);
  std::vector<NodeId> source(size_t(g.num_nodes()), -1);
  const std::string scope = std::string(kGradientScope) + ".", sum = kGradientSum;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.phase != Phase::backward) continue;
    // The first marker after which a forward node's name ends (a forward name may hold a
    // marker itself, though campo's models name none so).
    for (const std::string& marker : {scope, sum})
      for (size_t at = n.name.find(marker); at != std::string::npos && source[size_t(id)] < 0;
           at = n.name.find(marker, at + 1))
        if (const auto it = forward.find(n.name.substr(0, at)); it != forward.end())
          source[size_t(id)] = it->second;
  }
  return source;
}

}  // namespace campo
